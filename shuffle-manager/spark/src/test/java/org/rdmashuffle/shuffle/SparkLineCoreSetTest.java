package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.LogEvent;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.appender.AbstractAppender;
import org.apache.logging.log4j.core.config.Property;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaFutureAction;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

/**
 * What each Spark line this source builds is proven with (the per-line modules under
 * {@code shuffle-manager/spark-lines} run this class; the 4.2 module runs it with the full suite): in
 * {@code local-cluster} mode (separate executor JVMs, Spark's own jars of that release in SPARK_HOME) with
 * {@code spark.authenticate} on, groupByKey, sortByKey and SQL joins under AQE with coalesced and skew-split
 * partitions give what Spark's sort shuffle of the same release gives, with blocks READ between executors;
 * a reduce task killed mid-read gives back every receive buffer; an application that asks for what READs
 * cannot do falls back to the sort shuffle with its log line; an executor killed with its map outputs makes
 * Spark rerun those maps, and the results stay right.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class SparkLineCoreSetTest {
    private static final String SECRET = "rdma-shuffle-core-set-secret";

    private static final Map<String, Function<SparkSession, Object>> JOBS = new TreeMap<>(Map.of(
            "groupByKey", s -> groupByKey(JavaSparkContext.fromSparkContext(s.sparkContext())),
            "sortByKey", s -> sortByKey(JavaSparkContext.fromSparkContext(s.sparkContext())),
            "sqlCoalesce", RdmaShuffleLocalClusterTest::sqlCoalesce,
            "sqlSkew", RdmaShuffleLocalClusterTest::sqlSkew));

    private final Map<String, Object> expected = new TreeMap<>();
    /** Blocks and bytes the sort shuffle fetched for sqlCoalesceMany ({@link SparkLikeReadsTest#fetched}). */
    private long[] sortBatch;
    private final List<String> warnings = new CopyOnWriteArrayList<>();
    private AbstractAppender capture;
    private LocalCluster cluster;
    private Path markers;

    private static SparkConf authenticated(SparkConf conf) {
        return conf.set("spark.authenticate", "true").set("spark.authenticate.secret", SECRET)
                .set("spark.sql.autoBroadcastJoinThreshold", "-1");
    }

    static Object groupByKey(JavaSparkContext sc) {
        return new TreeMap<>(ShuffleJobs.pairs(sc, 60_000, 6, 2_000).groupByKey(5).mapValues(ShuffleJobs::digest)
                .collectAsMap());
    }

    static Object sortByKey(JavaSparkContext sc) {
        List<scala.Tuple2<Integer, String>> sorted = ShuffleJobs.pairs(sc, 60_000, 6, 50_000).sortByKey(false, 4)
                .collect();
        List<Integer> keys = new ArrayList<>(sorted.size());
        long digest = 0;
        for (scala.Tuple2<Integer, String> t : sorted) {
            keys.add(t._1());
            digest += t._2().hashCode();
        }
        return sorted.size() + " " + keys.hashCode() + " " + digest; // the key order, and every value once
    }

    @BeforeAll
    void runOnSortShuffleThenStartRdma() throws IOException {
        LocalCluster.assumeSparkHome();
        markers = Files.createTempDirectory("rdma-shuffle-core-set-");
        try (LocalCluster sort = LocalCluster.inProcess(authenticated(LocalCluster.conf(false)))) {
            JOBS.forEach((name, job) -> expected.put(name, job.apply(sort.spark)));
            int from = sort.stagesCompleted();
            expected.put("sqlCoalesceMany", RdmaShuffleLocalClusterTest.sqlCoalesceMany(sort.spark));
            sortBatch = SparkLikeReadsTest.fetched(sort, from);
        }
        // Spark has set up its logging by now: an appender added here stays for the rest of the class.
        capture = new AbstractAppender("rdma-shuffle-core-set", null, null, true, Property.EMPTY_ARRAY) {
            @Override
            public void append(LogEvent e) {
                if (e.getLevel().isMoreSpecificThan(Level.WARN)) {
                    warnings.add(e.getLoggerName() + ": " + e.getMessage().getFormattedMessage());
                }
            }
        };
        capture.start();
        LoggerContext ctx = (LoggerContext) LogManager.getContext(false);
        ctx.getConfiguration().getRootLogger().addAppender(capture, Level.WARN, null);
        ctx.updateLoggers();
        cluster = new LocalCluster(authenticated(LocalCluster.conf(true))
                .setMaster("local-cluster[" + LocalCluster.EXECUTORS + ",2,1024]"));
    }

    @AfterAll
    void stop() throws IOException {
        if (cluster != null) {
            cluster.close();
        }
        if (capture != null) {
            LoggerContext ctx = (LoggerContext) LogManager.getContext(false);
            ctx.getConfiguration().getRootLogger().removeAppender(capture.getName());
            ctx.updateLoggers();
            capture.stop();
        }
        if (markers != null) {
            try (var files = Files.walk(markers)) {
                files.sorted((a, b) -> b.compareTo(a)).forEach(p -> p.toFile().delete());
            }
        }
    }

    @Test
    @Order(1)
    @Timeout(300)
    void shouldMatchThisLinesSortShuffleForGroupSortAndAqeJoinsWithBlocksReadBetweenExecutors() {
        Map<String, LocalCluster.ExecutorProbe> before = cluster.probe();
        for (Map.Entry<String, Function<SparkSession, Object>> job : JOBS.entrySet()) {
            assertEquals(expected.get(job.getKey()), job.getValue().apply(cluster.spark),
                    job.getKey() + " on Spark " + SparkLines.version());
        }
        // the SQL jobs return [rows, whether AQE did what the job is for]
        assertEquals(true, ((List<?>) expected.get("sqlCoalesce")).get(1), "AQE did not coalesce partitions");
        assertEquals(true, ((List<?>) expected.get("sqlSkew")).get(1), "AQE did not split the skewed partition");
        Map<String, LocalCluster.ExecutorProbe> after = cluster.probe();
        long reads = LocalCluster.growth(before, after, s -> s.node().readsCompleted());
        long failed = LocalCluster.growth(before, after, s -> s.node().readsFailed());
        assertTrue(reads > 0, "no block was READ between executors: " + after);
        assertEquals(0, failed, "READs failed: " + after);
        assertTrue(cluster.recorder.fetchFailures.isEmpty(), cluster.recorder.fetchFailures.toString());
    }

    /**
     * AQE's coalesced reads ask for batch fetch ({@code spark.sql.adaptive.fetchShuffleBlocksInBatch}): Spark's
     * reader then fetches each map output's run of the task's partitions as one block and decodes it as one
     * stream. READ the same way, the blocks and bytes fetched are Spark's.
     */
    @Test
    @Order(2)
    @Timeout(300)
    void shouldFetchEachMapOutputsRunOfCoalescedPartitionsAsOneBlockAsSparksBatchFetchDoes() {
        Map<String, LocalCluster.ExecutorProbe> before = cluster.probe();
        int from = cluster.stagesCompleted();
        assertEquals(expected.get("sqlCoalesceMany"), RdmaShuffleLocalClusterTest.sqlCoalesceMany(cluster.spark));
        long[] rdma = SparkLikeReadsTest.fetched(cluster, from);
        Map<String, LocalCluster.ExecutorProbe> after = cluster.probe();
        assertEquals(true, ((List<?>) expected.get("sqlCoalesceMany")).get(1), "AQE did not coalesce partitions");
        assertTrue(rdma[1] > 0 && LocalCluster.growth(before, after, s -> s.node().readsCompleted()) > 0,
                "no block was READ: " + java.util.Arrays.toString(rdma));
        assertEquals(sortBatch[0] + sortBatch[1], rdma[0] + rdma[1], "blocks fetched (a batch counts once) against "
                + "Spark's sort shuffle: " + java.util.Arrays.toString(sortBatch) + " vs " + java.util.Arrays.toString(rdma));
        assertEquals(sortBatch[2] + sortBatch[3], rdma[2] + rdma[3], "bytes fetched against Spark's sort shuffle");
    }

    @Test
    @Order(3)
    @Timeout(300)
    void shouldGiveBackEveryReceiveBufferWhenReduceTasksAreKilledMidRead() throws Exception {
        int reducers = 4;
        Path dir = Files.createDirectories(markers.resolve("killed"));
        String where = dir.toString();
        cluster.sc.setJobGroup("killed", "reducers killed mid-read", true);
        JavaFutureAction<Long> job;
        try {
            job = RdmaShuffleTaskEndTest.records(cluster.sc).combineByKey(
                    v -> RdmaShuffleTaskEndTest.ReduceProbe.onRecord(where, 1L),
                    (c, v) -> RdmaShuffleTaskEndTest.ReduceProbe.onRecord(where, c + 1), Long::sum,
                    new HashPartitioner(reducers), false, null).countAsync();
        } finally {
            cluster.sc.clearJobGroup();
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (RdmaShuffleTaskEndTest.ReduceProbe.files(dir, "started-").size() < reducers) {
            assertTrue(System.nanoTime() < deadline, "reducers did not start reading");
            Thread.sleep(50);
        }
        cluster.sc.cancelJobGroup("killed");
        assertThrows(Exception.class, () -> job.get(120, TimeUnit.SECONDS));
        List<String> started = RdmaShuffleTaskEndTest.ReduceProbe.files(dir, "started-");
        while (RdmaShuffleTaskEndTest.ReduceProbe.files(dir, "ended-").size() < started.size()) {
            assertTrue(System.nanoTime() < deadline, "killed reducers did not end");
            Thread.sleep(50);
        }
        for (String f : RdmaShuffleTaskEndTest.ReduceProbe.files(dir, "ended-")) {
            assertEquals("0", Files.readString(dir.resolve(f), StandardCharsets.UTF_8),
                    f + ": records a killed reducer still read");
        }
        Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe();
        for (long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(60); ; probes = cluster.probe()) {
            if (probes.values().stream().allMatch(p -> p.stats() != null && p.stats().pool().inUseBuffers() == 0)) {
                break;
            }
            assertTrue(System.nanoTime() < end, "receive buffers still in use a minute after the kill: " + probes);
            Thread.sleep(200);
        }
    }

    @Test
    @Order(4)
    @Timeout(300)
    void shouldRerunTheMapsOfAKilledExecutorAndStillMatchSortShuffle() throws Exception {
        LocalCluster.assumeKill();
        JavaPairRDD<Integer, Long> grouped = ShuffleJobs.pairs(cluster.sc, 60_000, 6, 2_000).groupByKey(5)
                .mapValues(ShuffleJobs::digest);
        Map<Integer, Long> first = new TreeMap<>(grouped.collectAsMap());
        assertEquals(expected.get("groupByKey"), first);
        Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe();
        String victim = LocalCluster.holdingOutputs(probes);
        long pid = cluster.executorPids(LocalCluster.EXECUTORS).get(victim);
        int stagesBefore = cluster.stagesCompleted();
        LocalCluster.signal("KILL", pid);
        // the same reduce at once: its map outputs on the killed executor are gone with it
        Map<Integer, Long> second = new TreeMap<>(grouped.collectAsMap());
        assertEquals(first, second, "results after executor " + victim + " was killed");
        List<LocalCluster.StageShuffle> stages = cluster.stagesSince(stagesBefore);
        assertTrue(stages.size() > 1, "the killed executor's maps were not rerun: " + stages);
    }

    @Test
    @Order(5)
    @Timeout(300)
    void shouldFallBackToSortShuffleWithItsLogLineWhenAskedToEncryptInTransit() {
        cluster.close();
        cluster = null;
        warnings.clear();
        try (LocalCluster s = LocalCluster.inProcess(authenticated(LocalCluster.conf(true))
                .set("spark.network.crypto.enabled", "true"))) {
            assertEquals(expected.get("groupByKey"), groupByKey(s.sc));
        }
        List<String> fallback = warnings.stream()
                .filter(w -> w.contains("every shuffle of this application uses Spark's sort shuffle")
                        && w.contains("spark.network.crypto.enabled=true"))
                .toList();
        assertEquals(1, fallback.size(), "the fallback's WARN line, once: " + warnings);
        assertFalse(fallback.get(0).isBlank());
    }
}
