package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.ref.Reference;
import java.net.ServerSocket;
import java.util.List;
import java.util.Map;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

/**
 * Map outputs that cannot be READ — past an executor's registration cap, or on an executor whose
 * transport could not start — are fetched through Spark's own path by the reducers that need them,
 * next to the READs of the others: every record arrives, no fetch fails, the executor counts what it
 * left unregistered.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class RdmaShuffleSparkPathTest {
    private List<String> expected;

    @BeforeAll
    void runOnSortShuffle() {
        try (LocalCluster sort = LocalCluster.inProcess(LocalCluster.conf(false))) {
            expected = RdmaShuffleTaskEndTest.digests(sort.sc);
        }
    }

    /**
     * Shuffles the test records and asserts every record arrived as on the sort shuffle, with no fetch
     * failure. The caller holds the RDD until its probes are taken: a collected RDD lets Spark's
     * ContextCleaner remove the shuffle first.
     */
    private JavaPairRDD<Integer, byte[]> shuffleAndCheck(LocalCluster cluster) {
        JavaPairRDD<Integer, byte[]> shuffled = RdmaShuffleTaskEndTest.records(cluster.sc)
                .partitionBy(new HashPartitioner(48));
        List<String> got = RdmaShuffleTaskEndTest.digests(shuffled);
        cluster.drainEvents();
        assertEquals(expected, got);
        assertEquals(List.of(), cluster.recorder.fetchFailures, "no peer is to blame");
        return shuffled;
    }

    @Test
    @Timeout(300)
    void shouldFetchEveryBlockThroughSparksPathWhenReducersCannotGetMemoryForReceiveBuffers() {
        // Executors limited to 256 MiB of direct memory (Spark wants 200 MiB for its own fetches) and a
        // pool that allocates 512 MiB at once: no receive buffer can be had, as under a small
        // locked-memory limit with a verbs device.
        SparkConf conf = LocalCluster.conf(true)
                .set("spark.executor.extraJavaOptions", "-XX:MaxDirectMemorySize=256m")
                .set("spark.shuffle.rdma.pool.chunkSize", "512m")
                .set("spark.shuffle.rdma.localBlocksFromDisk", "false"); // own outputs too: READ or Spark's path
        try (LocalCluster cluster = new LocalCluster(conf)) {
            JavaPairRDD<Integer, byte[]> shuffled = shuffleAndCheck(cluster); // held until probed
            long fallbacks = 0;
            for (LocalCluster.ExecutorProbe p : cluster.probe().values()) {
                RdmaShuffleManager.ExecutorStats s = p.stats();
                assertEquals(0, s.pool().registeredBytes(), "a pool chunk was registered after all: " + s);
                assertTrue(s.registeredOutputBytes() > 0, "outputs were not registered, nothing to READ: " + s);
                fallbacks += s.receiveMemoryFallbacks();
            }
            assertTrue(fallbacks > 0, "no reducer fell back to Spark's path");
            Reference.reachabilityFence(shuffled);
        }
    }

    @Test
    @Timeout(300)
    void shouldFailTheJobNamingTheMemoryWhenReducersCannotGetReceiveBuffersAndFallbackIsNever() {
        SparkConf conf = LocalCluster.conf(true)
                .set("spark.executor.extraJavaOptions", "-XX:MaxDirectMemorySize=256m")
                .set("spark.shuffle.rdma.pool.chunkSize", "512m")
                .set("spark.shuffle.rdma.fallback", "never")
                .set("spark.task.maxFailures", "2")
                .set("spark.shuffle.rdma.localBlocksFromDisk", "false");
        try (LocalCluster cluster = new LocalCluster(conf)) {
            Exception e = assertThrows(Exception.class, () -> RdmaShuffleTaskEndTest.digests(cluster.sc));
            assertTrue(ShuffleJobs.messages(e).contains("cannot allocate"), ShuffleJobs.messages(e));
        }
    }

    @Test
    @Timeout(300)
    void shouldFetchOutputsPastTheRegistrationCapThroughSparksPathAndCountThem() {
        // 16 map outputs of about 1.4 MB: each executor registers two and leaves the rest to Spark's path.
        SparkConf conf = LocalCluster.conf(true)
                .set("spark.shuffle.rdma.maxRegisteredOutputBytes", "3m")
                .set("spark.shuffle.rdma.localBlocksFromDisk", "false"); // own outputs too: READ or Spark's path
        try (LocalCluster cluster = new LocalCluster(conf)) {
            JavaPairRDD<Integer, byte[]> shuffled = shuffleAndCheck(cluster); // held until probed
            Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe();
            long unregistered = 0;
            long registered = 0;
            long readOverTransport = 0;
            for (LocalCluster.ExecutorProbe p : probes.values()) {
                assertNotNull(p.stats(), "executor " + p.executorId() + " has no transport");
                assertTrue(p.stats().registeredOutputBytes() <= 3 << 20, "cap passed: " + p.stats());
                unregistered += p.stats().unregisteredOutputs();
                registered += p.stats().registeredOutputBytes();
                readOverTransport += p.stats().node().bytesRead();
            }
            assertTrue(unregistered > 0, "no output was left to Spark's path");
            assertTrue(unregistered < 16, "every output was left to Spark's path");
            assertTrue(registered > 0 && readOverTransport > 0, "nothing was READ: " + probes);
            Reference.reachabilityFence(shuffled);
        }
    }

    @Test
    @Timeout(300)
    void shouldDeliverEveryRecordWhenOneExecutorsTransportCannotStart() throws IOException {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        // Both executors want the same port and may not try another: one of them serves no node.
        SparkConf conf = LocalCluster.conf(true)
                .set("spark.shuffle.rdma.port", Integer.toString(port))
                .set("spark.shuffle.rdma.port.maxRetries", "0")
                .set("spark.shuffle.rdma.localBlocksFromDisk", "false");
        try (LocalCluster cluster = new LocalCluster(conf)) {
            JavaPairRDD<Integer, byte[]> shuffled = shuffleAndCheck(cluster); // held until probed
            Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe();
            long withTransport = probes.values().stream().filter(p -> p.stats() != null).count();
            assertEquals(1, withTransport, "expected exactly one executor with a transport: " + probes);
            for (LocalCluster.ExecutorProbe p : probes.values()) {
                if (p.stats() != null) {
                    assertTrue(p.stats().registeredOutputBytes() > 0, "the executor with a transport registered "
                            + "nothing: " + p.stats());
                } else {
                    assertNull(p.stats());
                }
            }
            Reference.reachabilityFence(shuffled);
        }
    }
}
