package org.rdmashuffle.shuffle;

import static org.apache.spark.sql.functions.count;
import static org.apache.spark.sql.functions.lit;
import static org.apache.spark.sql.functions.sum;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.CRC32;
import org.apache.spark.FetchFailed;
import org.apache.spark.HashPartitioner;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import scala.Tuple2;

/**
 * Real Spark in {@code local-cluster[2,1,1024]}: two executor JVMs, so blocks cross processes over
 * the tcp provider's one-sided READs. Shapes (empty outputs and partitions, a block of over 200 MiB,
 * 400 × 400, records larger than the largest pool buffer, outputs in many regions), Spark SQL with
 * AQE, metrics, lost map outputs and clean-up — each result equal to the same job on Spark's sort
 * shuffle, run first in the same JVM with the same settings.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class RdmaShuffleLocalClusterTest {
    private static final int BIG_RECORD_BYTES = 64 << 10;
    private static final int BIG_RECORDS_PER_MAP = 3_300; // 206 MiB per map output, all in one block
    private static final int LARGE_RECORD_BYTES = 3 << 19; // 1.5 MiB, over pool.maxBufferSize=256k

    private final Map<String, Object> expected = new HashMap<>();
    private LocalCluster cluster;

    private static SparkConf conf(boolean rdma) {
        return LocalCluster.conf(rdma)
                .set("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
                .set("spark.shuffle.compress", "false") // so the big block stays big
                .set("spark.shuffle.rdma.maxRegionSize", "1m") // every output over 1 MiB has several regions
                .set("spark.shuffle.rdma.pool.maxBufferSize", "256k")
                .set("spark.shuffle.rdma.orphanCheckInterval", "1s")
                .set("spark.sql.autoBroadcastJoinThreshold", "-1");
    }

    private static final Map<String, Function<LocalCluster, Object>> JOBS = new TreeMap<>(Map.of(
            "empty", c -> emptyOutputsAndPartitions(c.sc),
            "big", c -> bigBlock(c.sc),
            "400x400", c -> manyMapsManyReducers(c.sc),
            "large", c -> largeRecords(c.sc),
            "sqlCoalesce", c -> sqlCoalesce(c.spark),
            "sqlCoalesceMany", c -> sqlCoalesceMany(c.spark),
            "sqlSkew", c -> sqlSkew(c.spark),
            "sqlLocalRead", c -> sqlLocalRead(c.spark)));

    @BeforeAll
    void runOnSortShuffleThenStartRdma() {
        try (LocalCluster sort = LocalCluster.inProcess(conf(false))) {
            for (Map.Entry<String, Function<LocalCluster, Object>> j : JOBS.entrySet()) {
                expected.put(j.getKey(), j.getValue().apply(sort));
            }
        }
        cluster = new LocalCluster(conf(true));
    }

    @AfterAll
    void stop() {
        if (cluster != null) {
            cluster.close();
        }
    }

    // ---- jobs, each run on both managers ----

    static Object emptyOutputsAndPartitions(JavaSparkContext sc) {
        List<Integer> xs = new ArrayList<>();
        for (int i = 0; i < 12_000; i++) {
            xs.add(i);
        }
        // Maps 0, 3, 6 and 9 write nothing; 5 keys into 50 reducers leave most partitions empty.
        JavaPairRDD<Integer, String> d = sc.parallelize(xs, 12).filter(i -> (i / 1000) % 3 != 0)
                .mapToPair(i -> new Tuple2<>(i % 5 * 100, "e" + i));
        List<Object> out = new ArrayList<>();
        out.add(new TreeMap<>(d.groupByKey(50).mapValues(ShuffleJobs::digest).collectAsMap()));
        out.add(d.groupByKey(50).glom().map(List::size).collect());
        out.add(sc.parallelize(Collections.<Integer>emptyList(), 4).mapToPair(i -> new Tuple2<>(i, i))
                .reduceByKey(Integer::sum, 3).collect());
        return out;
    }

    static Object bigBlock(JavaSparkContext sc) {
        // Two maps (one per executor), every record to partition 0: one block of 206 MiB from each.
        return sc.parallelize(List.of(0, 1), 2).flatMapToPair(m -> {
            List<Tuple2<Integer, byte[]>> recs = new ArrayList<>();
            for (int j = 0; j < BIG_RECORDS_PER_MAP; j++) {
                byte[] v = new byte[BIG_RECORD_BYTES];
                java.util.Arrays.fill(v, (byte) (m * 31 + j));
                v[j % v.length] = (byte) j;
                recs.add(new Tuple2<>(0, v));
            }
            return recs.iterator();
        }).partitionBy(new HashPartitioner(2)).mapPartitions(it -> {
            long n = 0;
            long crcs = 0;
            while (it.hasNext()) {
                CRC32 crc = new CRC32();
                crc.update(it.next()._2());
                crcs += crc.getValue();
                n++;
            }
            return List.of(n + ":" + crcs).iterator();
        }).collect();
    }

    static Object manyMapsManyReducers(JavaSparkContext sc) {
        return new TreeMap<>(ShuffleJobs.pairs(sc, 40_000, 400, 4_000).mapValues(String::length)
                .reduceByKey(Integer::sum, 400).collectAsMap());
    }

    static Object largeRecords(JavaSparkContext sc) {
        List<Integer> xs = new ArrayList<>();
        for (int i = 0; i < 24; i++) {
            xs.add(i);
        }
        return new TreeMap<>(sc.parallelize(xs, 4).mapToPair(i -> {
            byte[] v = new byte[LARGE_RECORD_BYTES];
            new java.util.SplittableRandom(i).nextBytes(v);
            return new Tuple2<>(i % 3, v);
        }).groupByKey(3).mapValues(vs -> {
            long crcs = 0;
            for (byte[] v : vs) {
                CRC32 crc = new CRC32();
                crc.update(v);
                crcs += crc.getValue() + v.length;
            }
            return crcs;
        }).collectAsMap());
    }

    private static List<String> rows(Dataset<Row> q) {
        return q.collectAsList().stream().map(Row::toString).toList();
    }

    private static String plan(Dataset<Row> q) {
        return q.queryExecution().executedPlan().toString();
    }

    private static void aqe(SparkSession spark, Map<String, String> settings) {
        spark.conf().set("spark.sql.adaptive.enabled", "true");
        settings.forEach((k, v) -> spark.conf().set(k, v));
    }

    static Object sqlCoalesce(SparkSession spark) {
        aqe(spark, Map.of("spark.sql.shuffle.partitions", "40", "spark.sql.adaptive.coalescePartitions.enabled",
                "true", "spark.sql.adaptive.skewJoin.enabled", "false"));
        Dataset<Row> orders = spark.range(0, 200_000, 1, 6)
                .selectExpr("id AS oid", "id % 5000 AS cust", "(id * 7) % 1000 AS amount");
        Dataset<Row> custs = spark.range(0, 5_000, 1, 3).selectExpr("id AS cust", "concat('r', id % 37) AS region");
        Dataset<Row> q = orders.join(custs, "cust").groupBy("region")
                .agg(sum("amount").as("total"), count(lit(1)).as("n")).orderBy("region");
        List<String> r = rows(q);
        return List.of(r, plan(q).contains("AQEShuffleRead coalesced"));
    }

    /** 200 shuffle partitions, all holding rows, which AQE coalesces into a few reduce tasks. */
    static Object sqlCoalesceMany(SparkSession spark) {
        aqe(spark, Map.of("spark.sql.shuffle.partitions", "200", "spark.sql.adaptive.coalescePartitions.enabled",
                "true", "spark.sql.adaptive.skewJoin.enabled", "false"));
        Dataset<Row> q = spark.range(0, 300_000, 1, 6).selectExpr("id % 3000 AS k", "id AS v").groupBy("k")
                .agg(sum("v").as("sv"), count(lit(1)).as("n"));
        List<String> r = new ArrayList<>(rows(q));
        Collections.sort(r);
        return List.of(r, plan(q).contains("AQEShuffleRead coalesced"));
    }

    static Object sqlSkew(SparkSession spark) {
        aqe(spark, Map.of("spark.sql.shuffle.partitions", "10", "spark.sql.adaptive.coalescePartitions.enabled",
                "false", "spark.sql.adaptive.skewJoin.enabled", "true",
                "spark.sql.adaptive.skewJoin.skewedPartitionFactor", "2",
                "spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes", "1k",
                "spark.sql.adaptive.advisoryPartitionSizeInBytes", "16k"));
        Dataset<Row> orders = spark.range(0, 200_000, 1, 8)
                .selectExpr("CASE WHEN id % 2 = 0 THEN 0 ELSE id % 5000 END AS cust", "id AS amount");
        Dataset<Row> custs = spark.range(0, 5_000, 1, 3).selectExpr("id AS cust", "id % 7 AS grp");
        Dataset<Row> q = orders.join(custs, "cust").groupBy("grp")
                .agg(sum("amount").as("total"), count(lit(1)).as("n")).orderBy("grp");
        List<String> r = rows(q);
        return List.of(r, plan(q).contains("skew=true"));
    }

    static Object sqlLocalRead(SparkSession spark) {
        aqe(spark, Map.of("spark.sql.shuffle.partitions", "12", "spark.sql.adaptive.coalescePartitions.enabled",
                "false", "spark.sql.adaptive.skewJoin.enabled", "false",
                "spark.sql.adaptive.autoBroadcastJoinThreshold", "10m",
                "spark.sql.adaptive.localShuffleReader.enabled", "true"));
        Dataset<Row> big = spark.range(0, 100_000, 1, 6).selectExpr("id % 1000 AS k", "id AS v");
        Dataset<Row> small = spark.range(0, 100_000, 1, 4).where("id < 20").selectExpr("id AS k", "id * 2 AS w");
        Dataset<Row> q = big.join(small, "k").groupBy("k").agg(sum("v").as("sv"), sum("w").as("sw")).orderBy("k");
        List<String> r = rows(q);
        return List.of(r, plan(q).contains("AQEShuffleRead local"));
    }

    private void assertSameAsSort(String job) {
        assertEquals(expected.get(job), JOBS.get(job).apply(cluster), job);
    }

    // ---- tests ----

    @Test
    @Order(1)
    @Timeout(300)
    void shouldMatchSortShuffleWhenMapOutputsAndPartitionsAreEmpty() {
        assertSameAsSort("empty");
    }

    @Test
    @Order(2)
    @Timeout(300)
    void shouldMoveABlockOfOver200MibBetweenExecutors() {
        Map<String, LocalCluster.ExecutorProbe> before = cluster.probe();
        int from = cluster.stagesCompleted();
        assertSameAsSort("big");
        long remote = cluster.stagesSince(from).stream().mapToLong(LocalCluster.StageShuffle::remoteBytesRead).sum();
        assertTrue(remote >= (long) BIG_RECORDS_PER_MAP * BIG_RECORD_BYTES && remote >= 200L << 20,
                "the reducer read " + remote + " bytes remotely");
        assertNoRegistrationBeyondThePoolsChunks(before, "a block of 206 MiB");
    }

    /**
     * Blocks above {@code pool.maxBufferSize} stream through windows of the pool's largest class: a
     * job registers at most a chunk per executor and size class (32 MiB each), never a buffer of a
     * block's size (which the pool registers afresh per acquire above its largest class).
     */
    private void assertNoRegistrationBeyondThePoolsChunks(Map<String, LocalCluster.ExecutorProbe> before,
                                                          String what) {
        Map<String, LocalCluster.ExecutorProbe> after = cluster.probe();
        long registrations = LocalCluster.growth(before, after, st -> st.pool().registrations());
        long bytes = LocalCluster.growth(before, after, st -> st.pool().registeredBytes());
        assertTrue(registrations <= 2L * after.size(), what + ": " + registrations + " registrations, "
                + bytes + " bytes: " + after);
        assertTrue(bytes <= registrations * (32L << 20), what + ": " + bytes + " bytes registered in "
                + registrations + " registrations");
    }

    @Test
    @Order(3)
    @Timeout(300)
    void shouldMatchSortShuffleWith400MapsAnd400Reducers() {
        assertSameAsSort("400x400");
    }

    @Test
    @Order(4)
    @Timeout(300)
    void shouldMatchSortShuffleWhenRecordsExceedTheLargestPoolBuffer() {
        Map<String, LocalCluster.ExecutorProbe> before = cluster.probe();
        assertSameAsSort("large");
        assertNoRegistrationBeyondThePoolsChunks(before, "blocks of 3 MiB");
    }

    @Test
    @Order(5)
    @Timeout(300)
    void shouldMatchSortShuffleUnderAqeWhenPartitionsAreCoalesced() {
        assertEquals(List.of(((List<?>) expected.get("sqlCoalesce")).get(0), true), sqlCoalesce(cluster.spark));
    }

    @Test
    @Order(5)
    @Timeout(300)
    void shouldReadEachMapOutputsRunOfCoalescedPartitionsWithFewerReadsThanBlocks() {
        Map<String, LocalCluster.ExecutorProbe> before = cluster.probe();
        int from = cluster.stagesCompleted();
        assertEquals(List.of(((List<?>) expected.get("sqlCoalesceMany")).get(0), true), sqlCoalesceMany(cluster.spark));
        cluster.drainEvents();
        Map<String, LocalCluster.ExecutorProbe> after = cluster.probe();
        List<LocalCluster.StageShuffle> stages = cluster.stagesSince(from);
        long remoteBlocks = stages.stream().mapToLong(LocalCluster.StageShuffle::remoteBlocks).sum();
        long remoteBytes = stages.stream().mapToLong(LocalCluster.StageShuffle::remoteBytesRead).sum();
        long reads = after.values().stream().mapToLong(p -> p.stats().node().readsPosted()).sum()
                - before.values().stream().mapToLong(p -> p.stats().node().readsPosted()).sum();
        // 6 maps × 200 non-empty partitions, coalesced into a few tasks: about half of the 1,200 blocks are
        // remote. AQE asks for batch fetch, so Spark's metrics count each map output's run in a task as one
        // block (SparkLineCoreSetTest checks they equal the sort shuffle's).
        assertTrue(remoteBlocks > 0 && remoteBlocks <= 6 * 40, stages.toString());
        // One READ per partition's block (and more for slots and metadata) would be 300 or more; one request per
        // map output and task takes a few READs each.
        assertTrue(reads * 4 < 300, reads + " READs for " + remoteBlocks + " remote batches of about 600 blocks");
        assertEquals(remoteBytes, transportDataBytes(after) - transportDataBytes(before),
                "remote bytes in Spark's metrics (per block) vs block bytes READ over the transport");
    }

    @Test
    @Order(6)
    @Timeout(300)
    void shouldMatchSortShuffleUnderAqeWhenASkewedJoinReadsMapRanges() {
        assertEquals(List.of(((List<?>) expected.get("sqlSkew")).get(0), true), sqlSkew(cluster.spark));
    }

    @Test
    @Order(7)
    @Timeout(300)
    void shouldMatchSortShuffleUnderAqeWithTheLocalShuffleReader() {
        assertEquals(List.of(((List<?>) expected.get("sqlLocalRead")).get(0), true), sqlLocalRead(cluster.spark));
    }

    private static long transportDataBytes(Map<String, LocalCluster.ExecutorProbe> probes) {
        long sum = 0;
        for (LocalCluster.ExecutorProbe p : probes.values()) {
            sum += p.stats().node().bytesRead() - p.stats().controlBytesRead();
        }
        return sum;
    }

    private static long served(Map<String, LocalCluster.ExecutorProbe> probes) {
        return probes.values().stream().mapToLong(p -> p.stats().node().bytesServed()).sum();
    }

    private static long read(Map<String, LocalCluster.ExecutorProbe> probes) {
        return probes.values().stream().mapToLong(p -> p.stats().node().bytesRead()).sum();
    }

    @Test
    @Order(8)
    @Timeout(300)
    void shouldReportReadBytesEqualToWrittenAndRemoteBytesEqualToTransportBytes() {
        Map<String, LocalCluster.ExecutorProbe> before = cluster.probe();
        int from = cluster.stagesCompleted();
        long groups = ShuffleJobs.pairs(cluster.sc, 100_000, 6, 2_000).groupByKey(5).count();
        assertEquals(2_000, groups);
        Map<String, LocalCluster.ExecutorProbe> after = cluster.probe();
        List<LocalCluster.StageShuffle> stages = cluster.stagesSince(from);
        LocalCluster.StageShuffle write = stages.stream().filter(s -> s.bytesWritten() > 0).findFirst().orElseThrow();
        LocalCluster.StageShuffle readStage = stages.stream().filter(s -> s.recordsRead() > 0).findFirst()
                .orElseThrow();
        assertEquals(write.bytesWritten(), readStage.remoteBytesRead() + readStage.localBytesRead(), stages.toString());
        assertEquals(write.recordsWritten(), readStage.recordsRead(), stages.toString());
        assertTrue(readStage.remoteBytesRead() > 0 && readStage.localBytesRead() > 0, readStage.toString());
        assertTrue(readStage.remoteBlocks() > 0 && readStage.localBlocks() > 0, readStage.toString());
        assertEquals(readStage.remoteBytesRead(), transportDataBytes(after) - transportDataBytes(before),
                "remote bytes in Spark's metrics vs block bytes READ over the transport");
        assertEquals(read(after) - read(before), served(after) - served(before),
                "bytes READ by one executor are bytes served by the other");
    }

    @Test
    @Order(9)
    @Timeout(400)
    void shouldRerunMapsThroughFetchFailedExceptionWhenServedOutputsAreLost() {
        JavaPairRDD<Integer, Integer> counts = ShuffleJobs.pairs(cluster.sc, 50_000, 6, 500).mapValues(v -> 1)
                .reduceByKey(Integer::sum, 4);
        Map<Integer, Integer> first = new TreeMap<>(counts.collectAsMap());
        assertEquals(500, first.size());
        assertEquals(50_000, first.values().stream().mapToInt(Integer::intValue).sum());
        int shuffleId = ((ShuffleDependency<?, ?, ?>) counts.rdd().dependencies().head()).shuffleId();
        // Every executor withdraws its map outputs of the shuffle from its output table (files stay; the
        // tracker still lists them), as a serving executor that lost them would look to readers.
        Set<String> withdrawn = new TreeSet<>();
        for (int round = 0; round < 20 && withdrawn.size() < LocalCluster.EXECUTORS; round++) {
            withdrawn.addAll(cluster.sc.parallelize(List.of(0, 1, 2, 3, 4, 5, 6, 7), 8).map(x -> {
                ExecutorRuntime rt = ((RdmaShuffleManager) SparkEnv.get().shuffleManager()).runtime();
                RegisteredOutputTable t = rt.server.table(shuffleId, 6);
                for (int m = 0; m < 6; m++) {
                    t.remove(m);
                }
                return SparkEnv.get().executorId();
            }).collect());
        }
        int failuresBefore = cluster.recorder.fetchFailures.size();
        Map<Integer, Integer> second = new TreeMap<>(counts.collectAsMap());
        assertEquals(first, second);
        cluster.drainEvents();
        List<FetchFailed> failures = cluster.recorder.fetchFailures.subList(failuresBefore,
                cluster.recorder.fetchFailures.size());
        assertFalse(failures.isEmpty(), "no FetchFailedException although every served output was withdrawn");
        for (FetchFailed f : failures) {
            assertEquals(shuffleId, f.shuffleId(), f.toString());
            assertTrue(f.mapIndex() >= 0 && f.mapIndex() < 6 && f.reduceId() >= 0 && f.reduceId() < 4, f.toString());
            assertTrue(withdrawn.contains(f.bmAddress().executorId()), f.toString());
            // metadata cached from the first job: the offsets READ finds the region gone (a reducer without it
            // would find the slot empty and read the files, still on disk, through Spark's path)
            assertTrue(f.message().contains("offsets READ failed"), f.message());
        }
    }

    @Test
    @Order(9)
    @Timeout(300)
    void shouldReadThroughSparksPathWithoutAFetchFailureWhenPeersHoldNoOutputTable() {
        JavaPairRDD<Integer, Integer> counts = ShuffleJobs.pairs(cluster.sc, 50_000, 6, 500).mapValues(v -> 1)
                .reduceByKey(Integer::sum, 4);
        Map<Integer, Integer> first = new TreeMap<>(counts.collectAsMap());
        int shuffleId = ((ShuffleDependency<?, ?, ?>) counts.rdd().dependencies().head()).shuffleId();
        // Every executor drops its whole table for the shuffle (files stay; the tracker still lists
        // them), as an executor whose table could not be registered looks to readers.
        Set<String> dropped = new TreeSet<>();
        for (int round = 0; round < 20 && dropped.size() < LocalCluster.EXECUTORS; round++) {
            dropped.addAll(cluster.sc.parallelize(List.of(0, 1, 2, 3, 4, 5, 6, 7), 8).map(x -> {
                ((RdmaShuffleManager) SparkEnv.get().shuffleManager()).runtime().unregisterShuffle(shuffleId);
                return SparkEnv.get().executorId();
            }).collect());
        }
        long readBefore = read(cluster.probe());
        int failuresBefore = cluster.recorder.fetchFailures.size();
        Map<Integer, Integer> second = new TreeMap<>(counts.collectAsMap());
        assertEquals(first, second);
        cluster.drainEvents();
        assertEquals(failuresBefore, cluster.recorder.fetchFailures.size(), "fetch failures: "
                + cluster.recorder.fetchFailures);
        assertEquals(readBefore, read(cluster.probe()), "blocks were READ although no peer holds a table");
    }

    private static final Pattern SHUFFLE_FILE = Pattern.compile("shuffle_(\\d+)_.*");

    private static boolean holds(LocalCluster.ExecutorProbe p, int shuffleId) {
        return p.stats().shuffles().contains(shuffleId)
                || p.shuffleFiles().stream().anyMatch(f -> f.startsWith("shuffle_" + shuffleId + "_"));
    }

    @Test
    @Order(10)
    @Timeout(120)
    void shouldDropOutputsAndFilesOfAShuffleWhoseCleanupReachedNoExecutor() throws InterruptedException {
        JavaPairRDD<Integer, Integer> counts = ShuffleJobs.pairs(cluster.sc, 20_000, 4, 500).mapValues(v -> 1)
                .reduceByKey(Integer::sum, 4);
        assertEquals(500, counts.count());
        int shuffleId = ((ShuffleDependency<?, ?, ?>) counts.rdd().dependencies().head()).shuffleId();
        Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe();
        long holding = probes.values().stream().filter(p -> p.stats().shuffles().contains(shuffleId)).count();
        assertTrue(holding > 0, "no executor registered an output of shuffle " + shuffleId);
        long droppedBefore = probes.values().stream().mapToLong(p -> p.stats().orphanShufflesDropped()).sum();
        // Spark forgets the shuffle on the driver only: what an executor sees when the cleanup message misses it
        // (its block manager removed for a moment after a fetch failure, as in the tests above).
        ((org.apache.spark.MapOutputTrackerMaster) SparkEnv.get().mapOutputTracker()).unregisterShuffle(shuffleId);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < deadline && probes.values().stream().anyMatch(p -> holds(p, shuffleId))) {
            Thread.sleep(250);
            probes = cluster.probe();
        }
        for (LocalCluster.ExecutorProbe p : probes.values()) {
            assertFalse(p.stats().shuffles().contains(shuffleId), p.executorId() + " still holds the output table of "
                    + "shuffle " + shuffleId + " the driver cleaned: " + p.stats());
            assertEquals(List.of(), p.shuffleFiles().stream().filter(f -> f.startsWith("shuffle_" + shuffleId + "_"))
                    .toList(), p.executorId() + ": files of the cleaned shuffle left on disk");
        }
        long dropped = probes.values().stream().mapToLong(p -> p.stats().orphanShufflesDropped()).sum();
        assertTrue(dropped - droppedBefore >= holding, (dropped - droppedBefore) + " orphan shuffles dropped on "
                + holding + " executors holding one");
        java.lang.ref.Reference.reachabilityFence(counts);
    }

    @Test
    @Order(11)
    @Timeout(300)
    void shouldLeaveNoRegistrationsBuffersOrFilesWhenShufflesAreUnregistered() throws InterruptedException {
        // A shuffle of its own, held until cleaned: Spark's ContextCleaner may already have cleaned
        // every shuffle of the earlier tests (their RDDs were dropped and collected).
        org.apache.spark.api.java.JavaPairRDD<Integer, Iterable<String>> held =
                ShuffleJobs.pairs(cluster.sc, 20_000, 4, 500).groupByKey(4);
        assertEquals(500, held.count());
        Set<Integer> shuffles = new TreeSet<>();
        for (LocalCluster.ExecutorProbe p : cluster.probe().values()) {
            shuffles.addAll(p.stats().shuffles());
            for (String f : p.shuffleFiles()) {
                Matcher m = SHUFFLE_FILE.matcher(f);
                if (m.matches()) {
                    shuffles.add(Integer.parseInt(m.group(1)));
                }
            }
        }
        assertFalse(shuffles.isEmpty(), "the earlier tests left no shuffle to clean up");
        for (int id : shuffles) {
            cluster.sc.sc().cleaner().get().doCleanupShuffle(id, true);
        }
        // doCleanupShuffle is a no-op for a shuffle Spark's ContextCleaner already took off the
        // tracker after its RDD was collected; that cleanup is non-blocking, so its RemoveShuffle
        // may still be on its way to an executor, or missed one whose block manager the fetch
        // failures above had removed for a moment (the orphan check, every second here, drops those).
        // Wait (bounded) for every executor to be clean, then assert on what it holds.
        Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < deadline && !probes.values().stream().allMatch(
                p -> p.stats().shuffles().isEmpty() && p.shuffleFiles().isEmpty()
                        && p.stats().pool().inUseBuffers() == 0)) {
            Thread.sleep(500);
            probes = cluster.probe();
        }
        for (LocalCluster.ExecutorProbe p : probes.values()) {
            RdmaShuffleManager.ExecutorStats s = p.stats();
            assertEquals(List.of(), s.shuffles(), p.executorId() + " still holds output tables");
            assertEquals(0, s.registeredOutputBytes(), p.executorId() + " still has map outputs registered");
            assertEquals(s.pool().registeredBytes(), s.node().registeredBytes(),
                    p.executorId() + ": registered memory beyond the receive-buffer pool: " + s);
            assertEquals(0, s.pool().inUseBuffers(), p.executorId() + ": receive buffers not returned: " + s);
            assertEquals(List.of(), p.shuffleFiles(), p.executorId() + ": shuffle files left on disk");
        }
        // A map task of a cleaned shuffle that commits late (a cancelled stage's, a zombie attempt's) cannot
        // bring back a table nobody would remove.
        int cleaned = shuffles.iterator().next();
        List<Boolean> recreated = cluster.sc.parallelize(List.of(0, 1, 2, 3, 4, 5, 6, 7), 8).map(x ->
                ((RdmaShuffleManager) SparkEnv.get().shuffleManager()).runtime().server.table(cleaned, 4) != null).collect();
        assertFalse(recreated.contains(true), "an output table of cleaned shuffle " + cleaned + " was created again");
        java.lang.ref.Reference.reachabilityFence(held);
    }
}
