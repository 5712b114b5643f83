package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.apache.spark.FetchFailed;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
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

    private static void signal(String sig, long pid) throws IOException, InterruptedException {
        Process p = new ProcessBuilder("kill", "-" + sig, Long.toString(pid)).inheritIO().start();
        assertTrue(p.waitFor(10, TimeUnit.SECONDS) && p.exitValue() == 0, "kill -" + sig + " " + pid + " failed");
    }

    @Test
    @Timeout(600)
    void shouldBlameOnlyTheFrozenExecutorAndDeliverEveryRecordOnceItRunsAgain() throws Exception {
        assumeTrue(new java.io.File("/bin/kill").canExecute() || new java.io.File("/usr/bin/kill").canExecute(),
                "needs kill(1) to freeze an executor");
        List<String> expected;
        try (LocalCluster sort = new LocalCluster(conf(false))) {
            expected = RdmaShuffleTaskEndTest.digests(RdmaShuffleTaskEndTest.records(sort.sc)
                    .partitionBy(new HashPartitioner(12)));
        }
        try (LocalCluster cluster = new LocalCluster(conf(true))) {
            JavaPairRDD<Integer, byte[]> shuffled = RdmaShuffleTaskEndTest.records(cluster.sc)
                    .partitionBy(new HashPartitioner(12));
            assertEquals(expected, RdmaShuffleTaskEndTest.digests(shuffled)); // map outputs on all three
            Map<String, Long> pids = new TreeMap<>();
            for (int round = 0; round < 20 && pids.size() < 3; round++) {
                List<Integer> slots = IntStream.range(0, 24).boxed().toList();
                for (String s : cluster.sc.parallelize(slots, slots.size())
                        .map(i -> SparkEnv.get().executorId() + "=" + ProcessHandle.current().pid()).collect()) {
                    String[] kv = s.split("=");
                    pids.put(kv[0], Long.parseLong(kv[1]));
                }
            }
            assertEquals(3, pids.size(), "executors: " + pids);
            String frozen = pids.keySet().iterator().next();
            int failuresBefore = cluster.recorder.fetchFailures.size();
            signal("STOP", pids.get(frozen));
            Thread thaw = new Thread(() -> {
                try {
                    Thread.sleep(20_000);
                    signal("CONT", pids.get(frozen));
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            thaw.start();
            List<String> got;
            try {
                got = RdmaShuffleTaskEndTest.digests(shuffled); // the same map outputs, one holder frozen
            } finally {
                thaw.join();
            }
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
