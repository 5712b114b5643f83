package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import java.util.zip.CRC32;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaFutureAction;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Row;
import org.apache.spark.util.TaskCompletionListener;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;
import scala.Tuple2;

/**
 * Reduce tasks that end before they have read everything — a {@code take} and a SQL {@code LIMIT},
 * a task that throws, a job cancelled with and without interrupting its tasks — leave every
 * executor's receive-buffer pool with no buffer in use once their READs have landed; and many
 * reducers READing the same map outputs at once, every block through the transport with the smallest
 * bytes-in-flight budget, get every record Spark's sort shuffle delivers.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class RdmaShuffleTaskEndTest {
    private static final int MAPS = 16;
    private static final int RECORDS_PER_MAP = 12_500;

    private List<String> expectedDigests;
    private LocalCluster cluster;
    private Path markers;

    private static SparkConf conf(boolean rdma) {
        return LocalCluster.conf(rdma)
                .setMaster("local-cluster[" + LocalCluster.EXECUTORS + ",4,1024]") // four reducers per executor at once
                .set("spark.shuffle.compress", "false")
                .set("spark.shuffle.rdma.maxBytesInFlight", "64k") // the smallest budget
                .set("spark.shuffle.rdma.localBlocksFromDisk", "false"); // every block over the transport
    }

    @BeforeAll
    void runOnSortShuffleThenStartRdma() throws IOException {
        markers = Files.createTempDirectory("rdma-shuffle-task-end-");
        try (LocalCluster sort = LocalCluster.inProcess(conf(false))) {
            expectedDigests = digests(sort.sc);
        }
        cluster = new LocalCluster(conf(true));
    }

    @AfterAll
    void stop() throws IOException {
        if (cluster != null) {
            cluster.close();
        }
        if (markers != null) {
            try (Stream<Path> files = Files.walk(markers)) {
                files.sorted((a, b) -> b.compareTo(a)).forEach(p -> p.toFile().delete());
            }
        }
    }

    /** {@code MAPS} map outputs of records with values of 20 to 199 bytes, random but fixed. */
    static JavaPairRDD<Integer, byte[]> records(JavaSparkContext sc) {
        List<Integer> maps = new ArrayList<>();
        for (int m = 0; m < MAPS; m++) {
            maps.add(m);
        }
        return sc.parallelize(maps, MAPS).flatMapToPair(m -> {
            List<Tuple2<Integer, byte[]>> out = new ArrayList<>(RECORDS_PER_MAP);
            for (int j = 0; j < RECORDS_PER_MAP; j++) {
                long i = (long) m * RECORDS_PER_MAP + j;
                byte[] v = new byte[20 + (int) (i % 180)];
                new SplittableRandom(i).nextBytes(v);
                out.add(new Tuple2<>((int) ((i * 7919) % 5000), v));
            }
            return out.iterator();
        });
    }

    /** Per reduce partition: its index, how many records and an order-independent digest of every record. */
    static List<String> digests(JavaSparkContext sc) {
        return digests(records(sc).partitionBy(new HashPartitioner(48)));
    }

    /** Per partition of {@code shuffled}: its index, how many records and an order-independent digest of every record. */
    static List<String> digests(JavaPairRDD<Integer, byte[]> shuffled) {
        return digests(shuffled, 0, 0);
    }

    /** As {@link #digests(JavaPairRDD)}; reducers of partitions below {@code slow} wait {@code waitMs} after their first record. */
    static List<String> digests(JavaPairRDD<Integer, byte[]> shuffled, int slow, long waitMs) {
        return shuffled.mapPartitionsWithIndex((index, it) -> {
            long n = 0;
            long sum = 0;
            while (it.hasNext()) {
                Tuple2<Integer, byte[]> r = it.next();
                if (n == 0 && index < slow) {
                    Thread.sleep(waitMs); // a slow consumer: the blocks it fetched stay in the pool meanwhile
                }
                CRC32 crc = new CRC32();
                crc.update(r._2());
                sum += (crc.getValue() ^ ((long) r._1() << 32)) * 0x9E3779B97F4A7C15L + r._2().length;
                n++;
            }
            return List.of(index + ":" + n + ":" + sum).iterator();
        }, true).collect();
    }

    /** Polls every executor until none has a receive buffer in use, or fails after a minute. */
    private void assertEveryPoolReturnsItsBuffers(String after) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        Map<String, LocalCluster.ExecutorProbe> probes;
        for (;;) {
            probes = cluster.probe();
            boolean clean = true;
            for (LocalCluster.ExecutorProbe p : probes.values()) {
                clean &= p.stats() != null && p.stats().pool().inUseBuffers() == 0;
            }
            if (clean) {
                return;
            }
            if (System.nanoTime() > deadline) {
                break;
            }
            Thread.sleep(200);
        }
        Map<String, Object> pools = new TreeMap<>();
        probes.forEach((id, p) -> pools.put(id, p.stats() == null ? "no runtime" : p.stats().pool()));
        throw new AssertionError(after + ": receive buffers still in use a minute later: " + pools);
    }

    @Test
    @Order(1)
    @Timeout(300)
    void shouldDeliverEveryRecordWhenManyReducersReadTheSameOutputsAtOnce() throws InterruptedException {
        assertEquals(expectedDigests, digests(cluster.sc));
        assertEveryPoolReturnsItsBuffers("after the job");
    }

    @Test
    @Order(2)
    @Timeout(300)
    void shouldReturnEveryBufferWhenTakeOrLimitStopsReadingEarly() throws InterruptedException {
        List<Tuple2<Integer, byte[]>> first = records(cluster.sc).partitionBy(new HashPartitioner(8)).take(3);
        assertEquals(3, first.size());
        List<Row> limited = cluster.spark.range(0, 400_000, 1, 8)
                .selectExpr("id % 1000 AS k", "repeat('x', 100 + CAST(id % 50 AS INT)) AS v")
                .repartition(16, org.apache.spark.sql.functions.col("k")).limit(5).collectAsList();
        assertEquals(5, limited.size());
        assertEveryPoolReturnsItsBuffers("after take(3) and LIMIT 5");
    }

    @Test
    @Order(3)
    @Timeout(300)
    void shouldReturnEveryBufferWhenAReduceTaskThrowsMidIteration() throws InterruptedException {
        Exception e = assertThrows(Exception.class, () -> records(cluster.sc).partitionBy(new HashPartitioner(4))
                .mapPartitions(it -> {
                    it.next();
                    throw new IllegalStateException("boom: the reducer fails after its first record");
                }).count());
        assertTrue(ShuffleJobs.messages(e).contains("boom"), ShuffleJobs.messages(e));
        assertEveryPoolReturnsItsBuffers("after tasks that threw");
    }

    @Test
    @Order(4)
    @Timeout(300)
    void shouldStopReadingAndReturnEveryBufferWhenAJobIsCancelledMidReduce() throws Exception {
        assertCancelledReducersStopAndReturnBuffers("cancelled", false);
    }

    @Test
    @Order(5)
    @Timeout(300)
    void shouldStopReadingAndReturnEveryBufferWhenReduceTasksAreInterrupted() throws Exception {
        assertCancelledReducersStopAndReturnBuffers("interrupted", true);
    }

    /**
     * Reducers (aggregating, as {@code combineByKey} without map-side combine does) hold on to their
     * first record until their task is killed; then the job group is cancelled. A killed task must read
     * no further record, and every receive buffer must come back.
     */
    private void assertCancelledReducersStopAndReturnBuffers(String name, boolean interrupt) throws Exception {
        int reducers = 4;
        Path dir = Files.createDirectories(markers.resolve(name));
        String where = dir.toString();
        cluster.sc.setJobGroup(name, "reducers " + name + " mid-fetch", interrupt);
        JavaFutureAction<Long> job;
        try {
            job = records(cluster.sc).combineByKey(v -> ReduceProbe.onRecord(where, 1L),
                    (c, v) -> ReduceProbe.onRecord(where, c + 1), Long::sum, new HashPartitioner(reducers), false,
                    null).countAsync();
        } finally {
            cluster.sc.clearJobGroup();
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (ReduceProbe.files(dir, "started-").size() < reducers) {
            assertTrue(System.nanoTime() < deadline, "reducers did not start: " + ReduceProbe.files(dir, ""));
            Thread.sleep(50);
        }
        cluster.sc.cancelJobGroup(name);
        assertThrows(Exception.class, () -> job.get(120, TimeUnit.SECONDS));
        List<String> started = ReduceProbe.files(dir, "started-");
        while (ReduceProbe.files(dir, "ended-").size() < started.size()) {
            assertTrue(System.nanoTime() < deadline, "killed reducers did not end: " + ReduceProbe.files(dir, ""));
            Thread.sleep(50);
        }
        Map<String, String> readAfterKill = new TreeMap<>();
        for (String f : ReduceProbe.files(dir, "ended-")) {
            readAfterKill.put(f, Files.readString(dir.resolve(f), StandardCharsets.UTF_8));
        }
        for (Map.Entry<String, String> e : readAfterKill.entrySet()) {
            assertEquals("0", e.getValue(), "records a killed reducer still read: " + readAfterKill);
        }
        assertEveryPoolReturnsItsBuffers("after reducers were " + name);
    }

    /**
     * Runs inside reduce tasks: on a task's first record it writes {@code started-<attempt>} and waits
     * (at most two minutes) until the task is killed; it counts the records the task reads after that
     * and writes the count to {@code ended-<attempt>} when the task ends.
     */
    static final class ReduceProbe {
        private static final Map<Long, long[]> AFTER_KILL = new ConcurrentHashMap<>();

        private ReduceProbe() {
        }

        static long onRecord(String dir, long value) {
            TaskContext tc = TaskContext.get();
            long[] count = AFTER_KILL.get(tc.taskAttemptId());
            if (count != null) {
                count[0]++;
                return value;
            }
            long[] fresh = new long[1];
            AFTER_KILL.put(tc.taskAttemptId(), fresh);
            String attempt = Long.toString(tc.taskAttemptId());
            tc.addTaskCompletionListener((TaskCompletionListener) c -> {
                write(dir, "ended-" + attempt, Long.toString(fresh[0]));
                AFTER_KILL.remove(c.taskAttemptId());
            });
            write(dir, "started-" + attempt, "");
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (!tc.isInterrupted() && System.nanoTime() < deadline) {
                try {
                    Thread.sleep(10);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt(); // keep the interrupt for whoever reads next
                    break;
                }
            }
            return value;
        }

        private static void write(String dir, String name, String text) {
            try {
                Path tmp = Files.writeString(Path.of(dir, name + ".tmp"), text, StandardCharsets.UTF_8);
                Files.move(tmp, Path.of(dir, name));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        static List<String> files(Path dir, String prefix) throws IOException {
            try (Stream<Path> s = Files.list(dir)) {
                return s.map(p -> p.getFileName().toString())
                        .filter(n -> n.startsWith(prefix) && !n.endsWith(".tmp")).sorted().toList();
            }
        }
    }
}
