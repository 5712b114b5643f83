package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.util.List;
import java.util.Map;
import org.apache.spark.FetchFailed;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A serving executor frozen (SIGSTOP) while reducers on two other executors READ its map outputs:
 * their READs time out within {@code requestTimeout}, every fetch failure names the frozen executor —
 * never a healthy one, whose outputs Spark would then drop — and once it runs again (SIGCONT) the
 * job ends with every record right.
 */
class RdmaShuffleFrozenPeerTest {
    private static SparkConf conf(boolean rdma) {
        return LocalCluster.conf(rdma).setMaster("local-cluster[3,1,1024]")
                .set("spark.shuffle.rdma.requestTimeout", "3s")
                .set("spark.shuffle.rdma.localBlocksFromDisk", "false");
    }

    @Test
    @Timeout(600)
    void shouldBlameOnlyTheFrozenExecutorAndDeliverEveryRecordOnceItRunsAgain() throws Exception {
        LocalCluster.assumeKill();
        List<String> expected;
        try (LocalCluster sort = LocalCluster.inProcess(conf(false))) {
            expected = RdmaShuffleTaskEndTest.digests(RdmaShuffleTaskEndTest.records(sort.sc)
                    .partitionBy(new HashPartitioner(12)));
        }
        try (LocalCluster cluster = new LocalCluster(conf(true))) {
            JavaPairRDD<Integer, byte[]> shuffled = RdmaShuffleTaskEndTest.records(cluster.sc)
                    .partitionBy(new HashPartitioner(12));
            assertEquals(expected, RdmaShuffleTaskEndTest.digests(shuffled)); // map outputs on all three
            Map<String, Long> pids = cluster.executorPids(3);
            String frozen = pids.keySet().iterator().next();
            int failuresBefore = cluster.recorder.fetchFailures.size();
            // the same map outputs, one holder frozen for 20 s
            List<String> got = LocalCluster.whileFrozen(pids.get(frozen), 20_000,
                    () -> RdmaShuffleTaskEndTest.digests(shuffled));
            cluster.drainEvents();
            assertEquals(expected, got);
            List<FetchFailed> failures = cluster.recorder.fetchFailures.subList(failuresBefore,
                    cluster.recorder.fetchFailures.size());
            assertFalse(failures.isEmpty(), "no READ to the frozen executor timed out");
            for (FetchFailed f : failures) {
                assertEquals(frozen, f.bmAddress().executorId(), "a fetch failure blamed a healthy executor: "
                        + f.message());
            }
        }
    }
}
