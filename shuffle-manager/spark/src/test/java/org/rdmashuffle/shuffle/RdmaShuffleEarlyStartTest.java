package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Executors start their runtime (node, pool, directory registration) when they start, not on the
 * first shuffle task — and only when the application shuffles over the transport.
 */
class RdmaShuffleEarlyStartTest {

    @Test
    @Timeout(300)
    void shouldStartEveryExecutorsRuntimeBeforeAnyShuffleTaskRuns() throws InterruptedException {
        try (LocalCluster cluster = new LocalCluster(LocalCluster.conf(true))) {
            Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe(); // a job without a shuffle
            while (probes.values().stream().anyMatch(p -> p.stats() == null
                    || p.resources().threadsIn("rdma-shuffle-start") > 0)) { // @Timeout fails a start that never ends
                Thread.sleep(200);
                probes = cluster.probe();
            }
            assertEquals(cluster.executors, probes.size(), probes.keySet().toString());
            for (LocalCluster.ExecutorProbe p : probes.values()) {
                RdmaShuffleManager.ExecutorStats s = p.stats();
                assertEquals(List.of(), s.shuffles(), "an output table before any shuffle: " + s);
                assertEquals(0, s.node().readsCompleted(), s.toString());
            }
            // The early runtime is the one the shuffle uses: the blocks arrive by READs, as on a lazy start.
            List<String> got = RdmaShuffleTaskEndTest.digests(cluster.sc);
            assertEquals(48, got.size());
            long reads = cluster.probe().values().stream().mapToLong(p -> p.stats().node().readsCompleted()).sum();
            assertTrue(reads > 0, "no block was READ");
        }
    }

    @Test
    @Timeout(300)
    void shouldStartTheRuntimeOnTheFirstShuffleTaskWhenStartEarlyIsOff() {
        SparkConf conf = LocalCluster.conf(true).set("spark.shuffle.rdma.startEarly", "false");
        try (LocalCluster cluster = new LocalCluster(conf)) {
            cluster.sc.parallelize(List.of(1, 2, 3, 4), 4).count(); // seconds for a wrong start to show
            for (LocalCluster.ExecutorProbe p : cluster.probe().values()) {
                assertNull(p.stats(), "executor " + p.executorId() + " started its runtime before any shuffle");
            }
            assertEquals(48, RdmaShuffleTaskEndTest.digests(cluster.sc).size());
            long reads = cluster.probe().values().stream().mapToLong(p -> p.stats().node().readsCompleted()).sum();
            assertTrue(reads > 0, "no block was READ");
        }
    }

    @Test
    @Timeout(300)
    void shouldStartNoRuntimeEarlyWhenFallbackIsAlways() {
        SparkConf conf = LocalCluster.conf(true).set("spark.shuffle.rdma.fallback", "always");
        try (LocalCluster cluster = new LocalCluster(conf)) {
            assertEquals(48, RdmaShuffleTaskEndTest.digests(cluster.sc).size()); // seconds for a wrong start to show
            for (LocalCluster.ExecutorProbe p : cluster.probe().values()) {
                assertNull(p.stats(), "executor " + p.executorId() + " started a runtime although nothing uses it");
                assertEquals(0, p.resources().threadsIn("rdma-shuffle-start"), p.resources().threadGroups().toString());
            }
        }
    }
}
