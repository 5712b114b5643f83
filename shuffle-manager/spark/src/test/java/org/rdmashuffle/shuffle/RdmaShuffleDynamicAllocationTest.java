package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.BooleanSupplier;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Dynamic allocation with shuffle tracking and no external shuffle service: an executor holding
 * registered map outputs stays while its shuffle lives, idle executors without outputs go, new ones
 * READ from the one that stayed, and once the shuffle is cleaned the last one goes too.
 */
class RdmaShuffleDynamicAllocationTest {

    private static void await(BooleanSupplier condition, long seconds, String what) throws InterruptedException {
        long deadline = System.nanoTime() + seconds * 1_000_000_000L;
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError(what + " within " + seconds + " s");
            }
            Thread.sleep(200);
        }
    }

    private static Map<Integer, Long> expected(int records, int keys) {
        Map<Integer, Long> byKey = new TreeMap<>();
        Map<Integer, java.util.List<String>> values = new TreeMap<>();
        for (int i = 0; i < records; i++) {
            values.computeIfAbsent((int) ((i * 7919L) % keys), k -> new java.util.ArrayList<>()).add("v" + i);
        }
        values.forEach((k, v) -> byKey.put(k, ShuffleJobs.digest(v)));
        return byKey;
    }

    @Test
    @Timeout(400)
    void shouldKeepTheExecutorHoldingOutputsReleaseIdleOnesAndReadCorrectlyAsExecutorsComeAndGo() throws Exception {
        SparkConf conf = LocalCluster.conf(true)
                .set("spark.dynamicAllocation.enabled", "true")
                .set("spark.dynamicAllocation.shuffleTracking.enabled", "true")
                .set("spark.dynamicAllocation.minExecutors", "0")
                .set("spark.dynamicAllocation.initialExecutors", "2")
                .set("spark.dynamicAllocation.maxExecutors", "2")
                .set("spark.dynamicAllocation.executorIdleTimeout", "2s")
                .set("spark.dynamicAllocation.schedulerBacklogTimeout", "1s")
                .set("spark.dynamicAllocation.sustainedSchedulerBacklogTimeout", "1s")
                // reduce tasks go to whichever executor is free, not only to the one holding the outputs
                .set("spark.locality.wait", "0").set("spark.shuffle.reduceLocality.enabled", "false");
        try (LocalCluster cluster = new LocalCluster(conf)) {
            // One map task: its executor alone holds the shuffle's outputs.
            JavaPairRDD<Integer, Long> grouped = ShuffleJobs.pairs(cluster.sc, 100_000, 1, 3_000)
                    .groupByKey(8).mapValues(ShuffleJobs::digest);
            Map<Integer, Long> want = expected(100_000, 3_000);
            assertEquals(want, new TreeMap<>(grouped.collectAsMap()));
            // The idle executor without outputs goes; the one holding them stays past many idle timeouts.
            await(() -> cluster.executorIds().size() == 1, 60,
                    "the executor without shuffle outputs was not released");
            String stayed = cluster.executorIds().get(0);
            Thread.sleep(8_000); // four idle timeouts
            // On a loaded machine the first job's backlog can bring a spare executor that arrives late, idles
            // and is still being removed now: wait for it to go. The one holding the outputs must be the
            // one left, unchanged.
            await(() -> cluster.executorIds().size() == 1, 60, "a spare executor was not released");
            List<String> left = cluster.executorIds();
            assertEquals(List.of(stayed), left, "the executor holding the outputs must stay; executors now: " + left);
            // (probing runs tasks, and their backlog may bring an executor back: asked only now)
            RdmaShuffleManager.ExecutorStats holder = cluster.probe(1).get(left.get(0)).stats();
            assertEquals(1, holder.shuffles().size(), "the executor that stayed holds the shuffle's outputs");
            int shuffleId = holder.shuffles().get(0);
            assertTrue(holder.registeredOutputBytes() > 0);

            // The shuffle again, with slow reduce tasks (8 x 4 s): the backlog brings a second executor back,
            // which READs from the one that stayed.
            int stagesBefore = cluster.stagesCompleted();
            Map<Integer, Long> again = new TreeMap<>(grouped.mapPartitionsToPair(it -> {
                Thread.sleep(4_000);
                return it;
            }).collectAsMap());
            assertEquals(want, again);
            List<LocalCluster.StageShuffle> stages = cluster.stagesSince(stagesBefore);
            assertEquals(1, stages.size(), "the map stage did not rerun: " + stages);
            assertTrue(cluster.recorder.fetchFailures.isEmpty(), "fetch failures: " + cluster.recorder.fetchFailures);
            assertTrue(stages.get(0).remoteBytesRead() > 0, "no reduce task ran on an executor that came back: "
                    + stages.get(0));

            // Cleaned: nothing holds the executors any more, and every one goes.
            cluster.sc.sc().cleaner().get().doCleanupShuffle(shuffleId, true);
            // (the executors still there from the job above hold its outputs, and only those)
            await(() -> cluster.executorIds().isEmpty(), 60,
                    "executors were not released after their shuffle was cleaned");

            // And a new job scales up from none, shuffling correctly.
            Map<Integer, Long> fresh = new TreeMap<>(ShuffleJobs.pairs(cluster.sc, 100_000, 4, 3_000)
                    .groupByKey(4).mapValues(ShuffleJobs::digest).collectAsMap());
            assertEquals(want, fresh);
        }
    }
}
