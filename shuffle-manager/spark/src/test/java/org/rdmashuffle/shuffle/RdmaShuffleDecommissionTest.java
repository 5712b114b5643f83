package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.ExecutorAllocationClient;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.scheduler.ExecutorDecommissionInfo;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Option;

/**
 * Decommissioning with shuffle-block migration: Spark moves a leaving executor's map output files to
 * another executor and points the MapOutputTracker there. The new home did not write them, so its
 * output table does not hold them: readers take just those blocks through Spark's client and READ the
 * rest — the job finishes with correct results, no fetch failure and no stage retry.
 */
class RdmaShuffleDecommissionTest {

    @Test
    @Timeout(300)
    void shouldReadMigratedOutputsFromTheirNewHomeWithoutStageRetriesWhenAnExecutorIsDecommissioned()
            throws Exception {
        SparkConf conf = LocalCluster.conf(true).setMaster("local-cluster[3,1,1024]")
                .set("spark.decommission.enabled", "true")
                .set("spark.storage.decommission.enabled", "true")
                .set("spark.storage.decommission.shuffleBlocks.enabled", "true")
                .set("spark.storage.decommission.rddBlocks.enabled", "false")
                .set("spark.storage.decommission.replicationReattemptInterval", "1s") // default 30 s between checks
                // spread reduce tasks over both remaining executors, so migrated outputs are read remotely too
                .set("spark.locality.wait", "0").set("spark.shuffle.reduceLocality.enabled", "false");
        try (LocalCluster cluster = new LocalCluster(conf)) {
            JavaPairRDD<Integer, Long> grouped = ShuffleJobs.pairs(cluster.sc, 120_000, 12, 4_000)
                    .groupByKey(6).mapValues(ShuffleJobs::digest);
            Map<Integer, Long> first = new TreeMap<>(grouped.collectAsMap());
            assertEquals(4_000, first.size());
            Map<String, LocalCluster.ExecutorProbe> before = cluster.probe(3);
            String leaving = LocalCluster.holdingOutputs(before);

            ExecutorAllocationClient backend = (ExecutorAllocationClient) cluster.sc.sc().schedulerBackend();
            assertTrue(backend.decommissionExecutor(leaving,
                    new ExecutorDecommissionInfo("test decommissions it", Option.empty()), true, false),
                    "Spark did not accept decommissioning executor " + leaving);
            long deadline = System.nanoTime() + 120_000_000_000L;
            while (cluster.executorIds().contains(leaving)
                    && System.nanoTime() < deadline) {
                Thread.sleep(200);
            }
            assertTrue(!cluster.executorIds().contains(leaving),
                    "executor " + leaving + " did not leave within 120 s of its decommissioning");
            // The executors that took its outputs tell the driver's tracker each new home by RPC, apart from the
            // executor's exit; on a loaded machine the exit can be seen first (a job started then finds a map at
            // the gone executor, a fetch failure that is Spark's and not this test's subject): wait for them.
            awaitNoOutputsOn(leaving, 12, 6);
            cluster.drainEvents();
            int stagesBefore = cluster.stagesCompleted();

            Map<Integer, Long> second = new TreeMap<>(grouped.collectAsMap());
            assertEquals(first, second);
            List<LocalCluster.StageShuffle> stages = cluster.stagesSince(stagesBefore);
            assertEquals(1, stages.size(), "only the reduce stage ran (the migrated outputs were found): " + stages);
            assertEquals(0, stages.get(0).attempt(), "the reduce stage was retried");
            assertTrue(cluster.recorder.fetchFailures.isEmpty(), "fetch failures: " + cluster.recorder.fetchFailures);

            Map<String, LocalCluster.ExecutorProbe> after = cluster.probe(2);
            long viaSpark = LocalCluster.growth(before, after, RdmaShuffleManager.ExecutorStats::blocksViaSpark);
            long reads = LocalCluster.growth(before, after, s -> s.node().readsCompleted());
            assertTrue(reads > 0, "the outputs that stayed home were not READ");
            assertTrue(viaSpark > 0, "no migrated output was fetched through Spark's client from its new home");
            assertTrue(viaSpark < 6L * 12, "every block came through Spark's client: whole tasks fell back");
        }
    }

    /** Waits until the driver's map output tracker places no output of shuffle 0 on {@code executor}. */
    private static void awaitNoOutputsOn(String executor, int maps, int reduces) throws InterruptedException {
        org.apache.spark.MapOutputTrackerMaster tracker =
                (org.apache.spark.MapOutputTrackerMaster) org.apache.spark.SparkEnv.get().mapOutputTracker();
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (true) {
            boolean there = false;
            var located = tracker.getMapSizesByExecutorId(0, 0, maps, 0, reduces);
            while (located.hasNext()) {
                there |= located.next()._1().executorId().equals(executor);
            }
            if (!there) {
                return;
            }
            assertTrue(System.nanoTime() < deadline, "the driver still places outputs on executor " + executor
                    + " 60 s after it left: a migrated output's new home was never reported");
            Thread.sleep(100);
        }
    }
}
