package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Every shuffle operation in {@code local-cluster[2,1,1024]} (blocks cross executor JVMs) under
 * rdma-shuffle, for each serializer, compression codec and with I/O encryption: results equal the
 * same jobs on Spark's sort shuffle.
 */
class RdmaShuffleMatrixTest {
    private static List<String> expected;

    @BeforeAll
    static void runOnSortShuffle() {
        try (LocalCluster c = LocalCluster.inProcess(LocalCluster.conf(false))) {
            expected = ShuffleJobs.operations(c.sc);
        }
    }

    @ParameterizedTest(name = "{0} serializer, codec {1}, encryption {2}")
    @CsvSource({
        // each serializer uncompressed or compressed, each codec, encryption: four applications, not the
        // seven of every combination (each costs a cluster start; the Spark lines' budget in CI needs it)
        "kryo, none, false",
        "java, lz4, false",
        "java, zstd, false",
        "kryo, lz4, true",
    })
    @Timeout(300)
    void shouldMatchSortShuffleForEveryOperation(String serializer, String codec, boolean encryption) {
        SparkConf conf = LocalCluster.conf(true)
                .set("spark.serializer", serializer.equals("kryo") ? "org.apache.spark.serializer.KryoSerializer"
                        : "org.apache.spark.serializer.JavaSerializer")
                .set("spark.shuffle.rdma.maxRegionSize", "64k"); // several regions per map output
        if (codec.equals("none")) {
            conf.set("spark.shuffle.compress", "false").set("spark.shuffle.spill.compress", "false");
        } else {
            conf.set("spark.shuffle.compress", "true").set("spark.io.compression.codec", codec);
        }
        if (encryption) {
            conf.set("spark.io.encryption.enabled", "true").set("spark.authenticate", "true")
                    .set("spark.authenticate.secret", "rdma-shuffle-matrix-test-secret");
        }
        try (LocalCluster c = new LocalCluster(conf)) {
            List<String> got = ShuffleJobs.operations(c.sc);
            assertEquals(expected, got);
            Map<String, LocalCluster.ExecutorProbe> probes = c.probe();
            long remoteReads = 0;
            for (LocalCluster.ExecutorProbe p : probes.values()) {
                assertTrue(p.stats() != null, "executor " + p.executorId() + " never started its node");
                assertEquals(0, p.stats().node().readsFailed(), p.toString());
                remoteReads += p.stats().node().readsCompleted();
            }
            assertTrue(remoteReads > 0, "no block crossed executors by READ: " + probes);
            assertTrue(c.recorder.fetchFailures.isEmpty(), c.recorder.fetchFailures.toString());
        }
    }
}
