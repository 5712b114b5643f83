package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Four reduce tasks at once per executor, each wanting far more receive buffers in flight than the
 * executor's pool may register: they take turns for the pool's memory and all finish with every
 * record, without a deadlock, a pool timeout or a fetch failure.
 */
class RdmaShuffleStarvedPoolTest {
    private static SparkConf conf(boolean rdma) {
        return LocalCluster.conf(rdma)
                .setMaster("local-cluster[" + LocalCluster.EXECUTORS + ",4,1024]") // four reducers per executor
                .set("spark.shuffle.compress", "false");
    }

    @Test
    @Timeout(600)
    void shouldFinishEveryReducerWithEveryRecordWhenFourTasksShareAPoolFarSmallerThanTheyWouldKeepInFlight() {
        List<String> expected;
        try (LocalCluster sort = LocalCluster.inProcess(conf(false))) {
            expected = RdmaShuffleTaskEndTest.digests(RdmaShuffleTaskEndTest.records(sort.sc)
                    .partitionBy(new HashPartitioner(8)));
        }
        // 16 map outputs of ~1.4 MB, 8 reducers: each reducer wants ~2.8 MB in flight (48m allowed),
        // four at once on an executor ~11 MB; the pool may register 2 MB.
        SparkConf conf = conf(true)
                .set("spark.shuffle.rdma.localBlocksFromDisk", "false") // every block through the pool
                .set("spark.shuffle.rdma.pool.maxBufferSize", "256k")
                .set("spark.shuffle.rdma.pool.chunkSize", "256k")
                .set("spark.shuffle.rdma.pool.maxRegisteredBytes", "2m");
        try (LocalCluster cluster = new LocalCluster(conf)) {
            List<String> got = RdmaShuffleTaskEndTest.digests(RdmaShuffleTaskEndTest.records(cluster.sc)
                    .partitionBy(new HashPartitioner(8)));
            cluster.drainEvents();
            assertEquals(expected, got);
            assertEquals(List.of(), cluster.recorder.fetchFailures);
            Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe();
            for (LocalCluster.ExecutorProbe p : probes.values()) {
                var pool = p.stats().pool();
                assertTrue(pool.registeredBytes() <= 2 << 20, "pool passed its cap: " + pool);
                assertEquals(0, pool.timeouts(), "an acquire timed out: " + pool);
                assertEquals(0, pool.inUseBuffers(), "buffers left in use: " + pool);
            }
            long atCap = probes.values().stream().mapToLong(p -> p.stats().pool().waits()).sum();
            assertTrue(probes.values().stream().anyMatch(p -> p.stats().pool().registeredBytes() == 2 << 20),
                    "the pool never reached its cap, nothing was starved: " + probes + " (waits " + atCap + ")");
        }
    }

    /**
     * Three of four concurrent reducers on an executor hold their landed blocks for seconds before reading
     * them, so the pool stays at its cap past {@code pool.acquireTimeout} for the others: a task that cannot
     * get a buffer in time takes its remaining blocks through Spark's path instead of failing.
     */
    @Test
    @Timeout(600)
    void shouldReadThroughSparksPathInsteadOfFailingWhenSlowConsumersHoldThePoolPastTheAcquireTimeout() {
        starveAndRead("256k", "512k"); // two buffers per executor: two slow consumers hold them all
    }

    /**
     * The same with every block larger than the pool's largest buffer (~200 KB blocks, 64 KiB buffers), so
     * each is READ window by window as it is decoded: a reducer whose first window finds no room in time has
     * handed on no record of that block yet, and takes it and the rest through Spark's path.
     */
    @Test
    @Timeout(600)
    void shouldReadThroughSparksPathWhenAStreamedBlocksFirstWindowFindsNoRoomInThePoolInTime() {
        starveAndRead("64k", "256k");
    }

    private static void starveAndRead(String bufferSize, String poolCap) {
        List<String> expected;
        try (LocalCluster sort = LocalCluster.inProcess(conf(false))) {
            expected = slowDigests(sort);
        }
        SparkConf conf = conf(true)
                .set("spark.shuffle.rdma.localBlocksFromDisk", "false")
                .set("spark.shuffle.rdma.pool.maxBufferSize", bufferSize)
                .set("spark.shuffle.rdma.pool.chunkSize", bufferSize)
                .set("spark.shuffle.rdma.pool.maxRegisteredBytes", poolCap) // two or four buffers per executor
                .set("spark.shuffle.rdma.pool.acquireTimeout", "500ms")
                // four reducers on each executor at once, wherever the map outputs are: without these a skewed
                // map placement holds reducers back for locality and they no longer overlap (seen once in CI)
                .set("spark.locality.wait", "0s")
                .set("spark.shuffle.reduceLocality.enabled", "false");
        try (LocalCluster cluster = new LocalCluster(conf)) {
            List<String> got = slowDigests(cluster);
            cluster.drainEvents();
            assertEquals(expected, got);
            assertEquals(List.of(), cluster.recorder.failedTasks, "tasks failed");
            Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe();
            long exhausted = probes.values().stream().mapToLong(p -> p.stats().poolExhaustedTasks()).sum();
            assertTrue(exhausted > 0, "no reducer waited past the acquire timeout; the test did not starve the pool: "
                    + probes);
            for (LocalCluster.ExecutorProbe p : probes.values()) {
                assertEquals(0, p.stats().pool().inUseBuffers(), "buffers left in use: " + p.stats().pool());
            }
        }
    }

    /** Reducers of partitions 0 to 5 (of 8) wait 4 s after their first record. */
    private static List<String> slowDigests(LocalCluster cluster) {
        return RdmaShuffleTaskEndTest.digests(RdmaShuffleTaskEndTest.records(cluster.sc)
                .partitionBy(new HashPartitioner(8)), 6, 4000);
    }
}
