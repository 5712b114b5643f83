package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Consumer;
import java.util.function.Function;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.transport.NodeStats;
import scala.Tuple2;

/**
 * Real Spark in local mode (one executor, the driver's own): results equal Spark's sort shuffle
 * when blocks go through the tcp provider's READs and when they come straight from disk, and the
 * fallback policy does what {@code spark.shuffle.rdma.fallback} says.
 */
class RdmaShuffleLocalModeTest {

    private static SparkConf conf(boolean rdma) {
        SparkConf conf = new SparkConf().setMaster("local[2]").setAppName("rdma-shuffle-local")
                .set("spark.ui.enabled", "false").set("spark.driver.host", "127.0.0.1")
                .set("spark.driver.bindAddress", "127.0.0.1")
                .set("spark.shuffle.rdma.provider", "tcp")
                .set("spark.shuffle.rdma.maxRegionSize", "64k"); // several regions per map output
        if (rdma) {
            conf.set("spark.shuffle.manager", RdmaShuffleManager.class.getName());
        }
        return conf;
    }

    private static <T> T run(SparkConf conf, Function<JavaSparkContext, T> job, Consumer<RdmaShuffleManager> check) {
        try (JavaSparkContext sc = new JavaSparkContext(conf)) {
            T result = job.apply(sc);
            if (check != null) {
                check.accept((RdmaShuffleManager) SparkEnv.get().shuffleManager());
            }
            return result;
        }
    }

    private static JavaPairRDD<Integer, String> data(JavaSparkContext sc) {
        List<Integer> xs = new ArrayList<>();
        for (int i = 0; i < 50_000; i++) {
            xs.add(i);
        }
        return sc.parallelize(xs, 6).mapToPair(i -> new Tuple2<>((i * 7919) % 1000, "v" + i));
    }

    private static List<String> jobs(JavaSparkContext sc) {
        JavaPairRDD<Integer, String> d = data(sc);
        List<String> out = new ArrayList<>();
        Map<Integer, Integer> counts = new TreeMap<>(d.mapValues(v -> 1).reduceByKey(Integer::sum, 4).collectAsMap());
        out.add("reduceByKey " + counts);
        out.add("groupByKey " + ShuffleJobs.groupSizes(d, 5));
        List<Tuple2<Integer, String>> sorted = d.sortByKey(true, 3).take(20);
        out.add("sortByKey " + sorted.stream().map(t -> t._1()).toList());
        out.add("join " + d.join(d.mapValues(String::length), 4).count());
        out.add("distinct " + d.values().distinct(3).count());
        return out;
    }

    private static List<String> EXPECTED;

    @BeforeAll
    static void runOnSortShuffle() {
        // Not in a static initialiser: tasks deserialise this class's lambdas, which waits for it.
        EXPECTED = run(conf(false), RdmaShuffleLocalModeTest::jobs, null);
    }

    @Test
    @Timeout(300)
    void shouldMatchSortShuffleWhenLocalBlocksGoThroughRdmaReads() {
        SparkConf conf = conf(true).set("spark.shuffle.rdma.localBlocksFromDisk", "false");
        List<String> rdma = run(conf, RdmaShuffleLocalModeTest::jobs, m -> {
            RdmaShuffleManager.ExecutorStats s = m.executorStats().orElseThrow();
            NodeStats st = s.node();
            assertTrue(st.readsCompleted() > 0 && st.bytesRead() > 0, "no READs: " + st);
            assertEquals(0, st.readsFailed(), st.toString());
            // Local mode: the only node reads from itself, so what it read is what it served.
            assertEquals(st.bytesRead(), st.bytesServed(), st.toString());
            assertEquals(0, s.pool().inUseBuffers(), "receive buffers left in use");
        });
        assertEquals(EXPECTED, rdma);
        assertTrue(rdma.get(4).endsWith(" 50000"), rdma.get(4));
    }

    @Test
    @Timeout(300)
    void shouldReadOwnBlocksFromDiskWithoutAnyReadWhenLocalBlocksFromDisk() {
        List<String> rdma = run(conf(true), RdmaShuffleLocalModeTest::jobs, m -> {
            RdmaShuffleManager.ExecutorStats s = m.executorStats().orElseThrow();
            assertEquals(0, s.node().readsCompleted() + s.node().readsFailed(), "READs for local blocks: " + s);
            assertTrue(s.registeredOutputBytes() > 0, "map outputs are still registered for remote readers");
        });
        assertEquals(EXPECTED, rdma);
    }

    @Test
    @Timeout(120)
    void shouldUseSortShuffleAndSayWhyWhenVerbsCannotRunAndFallbackIsAuto() {
        SparkConf conf = conf(true).set("spark.shuffle.rdma.provider", "verbs");
        List<String> result = run(conf, RdmaShuffleLocalModeTest::jobs, m -> {
            assertTrue(m.driverFallback().orElseThrow().contains("provider=verbs"), m.driverFallback().toString());
            assertFalse(m.executorStats().isPresent(), "the transport started although the driver fell back");
        });
        assertEquals(EXPECTED, result);
    }

    @Test
    @Timeout(120)
    void shouldUseSortShuffleAndSayWhyWhenNetworkEncryptionIsOnButShuffleFilesAreNotEncrypted() {
        SparkConf conf = conf(true).set("spark.authenticate", "true").set("spark.authenticate.secret", "s3cret")
                .set("spark.network.crypto.enabled", "true");
        List<String> result = run(conf, RdmaShuffleLocalModeTest::jobs, m -> {
            String why = m.driverFallback().orElseThrow();
            assertTrue(why.contains("spark.network.crypto.enabled") && why.contains("spark.io.encryption.enabled"), why);
            assertFalse(m.executorStats().isPresent(), "the transport started although READs would be in the clear");
        });
        assertEquals(EXPECTED, result);
    }

    @Test
    @Timeout(120)
    void shouldReadOverTheTransportWhenNetworkEncryptionIsOnAndShuffleFilesAreEncrypted() {
        SparkConf conf = conf(true).set("spark.authenticate", "true").set("spark.authenticate.secret", "s3cret")
                .set("spark.network.crypto.enabled", "true").set("spark.io.encryption.enabled", "true");
        List<String> result = run(conf, RdmaShuffleLocalModeTest::jobs, m -> {
            assertTrue(m.driverFallback().isEmpty(), m.driverFallback().toString());
            assertTrue(m.executorStats().orElseThrow().registeredOutputBytes() > 0, "nothing registered");
        });
        assertEquals(EXPECTED, result);
    }

    @Test
    @Timeout(120)
    void shouldFailTheApplicationWhenNetworkEncryptionIsOnShuffleFilesAreNotAndFallbackIsNever() {
        SparkConf conf = conf(true).set("spark.authenticate", "true").set("spark.authenticate.secret", "s3cret")
                .set("spark.network.crypto.enabled", "true").set("spark.shuffle.rdma.fallback", "never");
        Throwable e = assertThrows(Throwable.class, () -> new JavaSparkContext(conf).close());
        String all = ShuffleJobs.messages(e);
        assertTrue(all.contains("fallback=never") && all.contains("spark.io.encryption.enabled"), all);
    }

    @Test
    @Timeout(120)
    void shouldFailTheApplicationNamingTheReasonWhenVerbsCannotRunAndFallbackIsNever() {
        SparkConf conf = conf(true).set("spark.shuffle.rdma.provider", "verbs")
                .set("spark.shuffle.rdma.fallback", "never");
        Throwable e = assertThrows(Throwable.class, () -> new JavaSparkContext(conf).close());
        String all = ShuffleJobs.messages(e);
        assertTrue(all.contains("fallback=never") && all.contains("verbs provider cannot run"), all);
    }

    @Test
    @Timeout(120)
    void shouldFallBackOnTheExecutorWhenItsNodeCannotListenAndFallbackIsAuto() throws Exception {
        try (ServerSocket taken = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            SparkConf conf = conf(true).set("spark.shuffle.rdma.port", Integer.toString(taken.getLocalPort()))
                    .set("spark.shuffle.rdma.port.maxRetries", "0");
            List<String> result = run(conf, RdmaShuffleLocalModeTest::jobs, m -> {
                assertTrue(m.driverFallback().isEmpty());
                assertFalse(m.executorStats().isPresent(), "a node started on a taken port");
            });
            assertEquals(EXPECTED, result);
        }
    }

    @Test
    @Timeout(120)
    void shouldFailTheJobNamingThePortWhenTheNodeCannotListenAndFallbackIsNever() throws Exception {
        try (ServerSocket taken = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            SparkConf conf = conf(true).set("spark.shuffle.rdma.port", Integer.toString(taken.getLocalPort()))
                    .set("spark.shuffle.rdma.port.maxRetries", "0").set("spark.shuffle.rdma.fallback", "never");
            Throwable e = assertThrows(Throwable.class, () -> run(conf, RdmaShuffleLocalModeTest::jobs, null));
            String all = ShuffleJobs.messages(e);
            assertTrue(all.contains("cannot start its transport") && all.contains(
                    Integer.toString(taken.getLocalPort())), all);
        }
    }
}
