package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.spark.MapOutputTrackerMaster;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.api.java.JavaPairRDD;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.shuffle.core.diagnostics.ProcessResources;

/**
 * One application runs shuffle after shuffle and lets Spark's {@code ContextCleaner} clean each one
 * (its RDD is dropped and collected, nothing calls a cleanup by hand): after every cleanup each
 * executor holds no output table, no registered output, no shuffle file and no mapping of one, and
 * over the whole run its open descriptors, threads and direct memory stay at the baseline taken
 * after the warm-up shuffles — a leak of one of them per shuffle would show as growth.
 */
class RdmaShuffleSoakTest {
    private static final int WARM_UP = 3;
    private static final int SHUFFLES = 30;
    private static final int RECORDS = 40_000;
    private static final int KEYS = 700;
    /** Room for what Spark itself starts and stops between samples (task threads, RPC connections). */
    private static final int FD_SLACK = 8;
    private static final int THREAD_SLACK = 8;
    private static final long DIRECT_SLACK = 8 << 20;
    /**
     * Spark's executor pool for block and shuffle removal: a new thread per removal until it has 100,
     * each ending after 60 s idle — it grows with every cleanup under any shuffle manager, to its bound.
     */
    private static final String SPARK_STORAGE_POOL = "block-manager-storage-async-thread-pool-#";

    @Test
    @Timeout(900)
    void shouldGiveBackEveryRegistrationFileMappingDescriptorAndThreadAfterEachShuffleTheContextCleanerCleans()
            throws InterruptedException {
        Map<Integer, Integer> expected = new TreeMap<>();
        for (int i = 0; i < RECORDS; i++) {
            expected.merge((int) ((i * 7919L) % KEYS), ("v" + i).length(), Integer::sum);
        }
        try (LocalCluster cluster = new LocalCluster(LocalCluster.conf(true)
                .set("spark.cleaner.referenceTracking.blocking", "true")
                .set("spark.cleaner.referenceTracking.blocking.shuffle", "true"))) {
            Map<String, ProcessResources> baseline = null;
            List<String> curve = new ArrayList<>();
            Map<String, ProcessResources> last = null;
            long readsBefore = 0;
            for (int round = 0; round < WARM_UP + SHUFFLES; round++) {
                int shuffleId = shuffleOnce(cluster, expected, round);
                awaitCleaned(cluster, shuffleId);
                Map<String, LocalCluster.ExecutorProbe> probes = awaitExecutorsClean(cluster, shuffleId);
                Map<String, ProcessResources> now = new TreeMap<>();
                probes.forEach((id, p) -> now.put(id, p.resources()));
                curve.add("shuffle " + shuffleId + ": " + now);
                // Every shuffle READ over the transport, none fell back to Spark's path: the checks above
                // would hold trivially for shuffles that never registered or READ anything.
                long reads = probes.values().stream().mapToLong(p -> p.stats().node().readsCompleted()).sum();
                assertTrue(reads > readsBefore, "shuffle " + shuffleId + " was not READ over the transport");
                readsBefore = reads;
                for (LocalCluster.ExecutorProbe p : probes.values()) {
                    assertEquals(0, p.stats().unregisteredOutputs() + p.stats().receiveMemoryFallbacks(),
                            "something went to Spark's path: " + p.stats());
                }
                if (round == WARM_UP - 1) {
                    baseline = now;
                }
                last = now;
            }
            System.out.println("executor resources after each cleanup:\n  " + String.join("\n  ", curve));
            for (String id : baseline.keySet()) {
                System.out.println("executor " + id + " threads after the warm-up: " + baseline.get(id).threadGroups()
                        + "\n  after the last shuffle: " + last.get(id).threadGroups());
            }
            for (Map.Entry<String, ProcessResources> e : baseline.entrySet()) {
                ProcessResources from = e.getValue();
                ProcessResources to = last.get(e.getKey());
                String where = "executor " + e.getKey() + " from " + from + " to " + to + " over " + SHUFFLES
                        + " shuffles; curve:\n  " + String.join("\n  ", curve);
                assertTrue(to.openFds() <= from.openFds() + FD_SLACK, "descriptors grew: " + where);
                for (Map.Entry<String, Integer> g : to.threadGroups().entrySet()) {
                    if (!g.getKey().equals(SPARK_STORAGE_POOL)) {
                        assertTrue(g.getValue() <= from.threadsIn(g.getKey()) + THREAD_SLACK, "threads \""
                                + g.getKey() + "\" grew from " + from.threadsIn(g.getKey()) + " to " + g.getValue()
                                + ": " + where + "\nthreads then: " + from.threadGroups() + "\nnow: "
                                + to.threadGroups());
                    }
                }
                assertTrue(to.threadsIn(SPARK_STORAGE_POOL) <= 100, "Spark's storage pool passed its bound: " + where);
                assertTrue(to.directBytes() <= from.directBytes() + DIRECT_SLACK, "direct memory grew: " + where);
            }
        }
    }

    /** Runs one reduceByKey, checks its result, and returns its shuffle id; the RDD is dropped on return. */
    private static int shuffleOnce(LocalCluster cluster, Map<Integer, Integer> expected, int round) {
        JavaPairRDD<Integer, Integer> sums = ShuffleJobs.pairs(cluster.sc, RECORDS, 6, KEYS)
                .mapValues(String::length).reduceByKey(Integer::sum, 5);
        assertEquals(expected, new TreeMap<>(sums.collectAsMap()), "shuffle of round " + round);
        return ((ShuffleDependency<?, ?, ?>) sums.rdd().dependencies().head()).shuffleId();
    }

    /** Collects garbage on the driver until Spark's cleaner has taken the shuffle off its tracker. */
    private static void awaitCleaned(LocalCluster cluster, int shuffleId) throws InterruptedException {
        MapOutputTrackerMaster tracker = (MapOutputTrackerMaster) cluster.sc.sc().env().mapOutputTracker();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (tracker.containsShuffle(shuffleId)) {
            assertTrue(System.nanoTime() < deadline, "ContextCleaner did not clean shuffle " + shuffleId + " in 60 s");
            System.gc();
            Thread.sleep(100);
        }
    }

    /**
     * Every executor's probe once none holds anything of the shuffle (bounded: the cleaner's removal
     * reaches executors asynchronously); asserts what each then holds.
     */
    private static Map<String, LocalCluster.ExecutorProbe> awaitExecutorsClean(LocalCluster cluster, int shuffleId)
            throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe();
        while (System.nanoTime() < deadline && !probes.values().stream().allMatch(p -> p.stats().shuffles().isEmpty()
                && p.shuffleFiles().isEmpty() && p.resources().shuffleMappings() <= 0)) {
            Thread.sleep(200);
            probes = cluster.probe();
        }
        for (LocalCluster.ExecutorProbe p : probes.values()) {
            RdmaShuffleManager.ExecutorStats s = p.stats();
            String where = "executor " + p.executorId() + " after shuffle " + shuffleId + " was cleaned: " + s;
            assertEquals(List.of(), s.shuffles(), "output tables left: " + where);
            assertEquals(0, s.registeredOutputBytes(), "outputs left registered: " + where);
            assertEquals(s.pool().registeredBytes(), s.node().registeredBytes(),
                    "registered memory beyond the receive-buffer pool: " + where);
            assertEquals(0, s.pool().inUseBuffers(), "receive buffers not returned: " + where);
            assertEquals(List.of(), p.shuffleFiles(), "shuffle files left: " + where);
            assertTrue(p.resources().shuffleMappings() <= 0, "shuffle files still mapped: " + p.resources());
        }
        return probes;
    }
}
