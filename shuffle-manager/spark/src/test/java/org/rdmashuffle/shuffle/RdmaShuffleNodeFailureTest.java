package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Field;
import java.nio.channels.Selector;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.spark.FetchFailed;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaPairRDD;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.transport.RdmaNode;

/**
 * One executor's transport fails mid-reduce (its requester loop cannot go on, as a bug or a dead device
 * would leave it): nobody is blamed for it. That executor reads through Spark's path, its node leaves the
 * directory and closes, readers elsewhere take its blocks through Spark's path too, the job's results equal
 * sort shuffle's, and no fetch failure names a healthy executor. Once its tasks let go, it starts a new node,
 * which serves the next shuffle's READs.
 */
class RdmaShuffleNodeFailureTest {
    /** Set in the failing executor's JVM once its node was failed, so only one task does it. */
    private static final AtomicBoolean FAILED = new AtomicBoolean();

    private static SparkConf conf(boolean rdma) {
        return LocalCluster.conf(rdma).setMaster("local-cluster[3,1,1024]")
                .set("spark.shuffle.rdma.requestTimeout", "20s");
    }

    @Test
    @Timeout(600)
    void shouldBlameNoHealthyExecutorAndDeliverEveryRecordWhenOneExecutorsNodeFailsMidReduce() throws Exception {
        List<String> expected;
        try (LocalCluster sort = LocalCluster.inProcess(conf(false))) {
            expected = RdmaShuffleTaskEndTest.digests(RdmaShuffleTaskEndTest.records(sort.sc)
                    .partitionBy(new HashPartitioner(24)));
        }
        try (LocalCluster cluster = new LocalCluster(conf(true))) {
            String victim = cluster.executorPids(3).keySet().iterator().next();
            JavaPairRDD<Integer, byte[]> shuffled = RdmaShuffleTaskEndTest.records(cluster.sc)
                    .partitionBy(new HashPartitioner(24))
                    .mapPartitionsToPair(it -> new FailingNodeAfter<>(it, victim, 200));
            assertEquals(expected, RdmaShuffleTaskEndTest.digests(shuffled));
            cluster.drainEvents();
            for (FetchFailed f : cluster.recorder.fetchFailures) {
                assertEquals(victim, f.bmAddress().executorId(), "a fetch failure blamed a healthy executor: "
                        + f.message());
            }
            Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe(3);
            assertTrue(probes.get(victim).stats() == null || probes.get(victim).stats().nodeFailed() == 1
                    || probes.get(victim).stats().nodeRestarts() > 0, "the node never failed: " + probes.get(victim));
            long viaSpark = probes.values().stream().filter(p -> p.stats() != null)
                    .mapToLong(p -> p.stats().blocksViaSpark()).sum();
            assertTrue(viaSpark > 0, "no reader took the failed node's blocks through Spark's path: " + probes);

            // The next shuffle: the executor started a new node, which serves READs again.
            int before = cluster.stagesCompleted();
            assertEquals(expected, RdmaShuffleTaskEndTest.digests(RdmaShuffleTaskEndTest.records(cluster.sc)
                    .partitionBy(new HashPartitioner(24))));
            cluster.drainEvents();
            assertTrue(cluster.stagesSince(before).stream().anyMatch(s -> s.remoteBlocks() > 0), "nothing READ");
            LocalCluster.ExecutorProbe again = cluster.probe(3).get(victim);
            assertEquals(1, again.stats().nodeRestarts(), "no new node: " + again);
            assertEquals(0, again.stats().nodeFailed());
            assertTrue(again.stats().node().readsServed() > 0 || again.stats().node().readsCompleted() > 0,
                    "the new node neither served nor READ: " + again);
        }
    }

    /** Passes records on; in {@code victim}'s first reduce task, fails its node after {@code after} records. */
    private static final class FailingNodeAfter<T> implements java.util.Iterator<T> {
        private final java.util.Iterator<T> in;
        private final boolean fails;
        private final int after;
        private int n;

        FailingNodeAfter(java.util.Iterator<T> in, String victim, int after) {
            this.in = in;
            this.after = after;
            this.fails = SparkEnv.get().executorId().equals(victim) && TaskContext.get().attemptNumber() == 0;
        }

        @Override
        public boolean hasNext() {
            return in.hasNext();
        }

        @Override
        public T next() {
            if (fails && ++n == after && FAILED.compareAndSet(false, true)) {
                failRequesterLoop();
            }
            return in.next();
        }
    }

    /**
     * Makes this executor's tcp requester loop unable to go on, as a bug in it would: closes the selector it
     * waits on (it then fails the node and every channel).
     */
    static void failRequesterLoop() {
        try {
            RdmaShuffleManager m = (RdmaShuffleManager) SparkEnv.get().shuffleManager();
            RdmaNode node = m.startedRuntime().node;
            Object requester = fieldOfType(node, "TcpRequester");
            ((Selector) fieldOfType(requester, "Selector")).close();
        } catch (Exception e) {
            throw new IllegalStateException("cannot fail the node's requester loop", e);
        }
    }

    private static Object fieldOfType(Object o, String simpleName) throws IllegalAccessException {
        for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
            for (Field f : c.getDeclaredFields()) {
                for (Class<?> t = f.getType(); t != null; t = t.getSuperclass()) {
                    if (t.getSimpleName().equals(simpleName)) {
                        f.setAccessible(true);
                        return f.get(o);
                    }
                }
            }
        }
        throw new IllegalStateException(o.getClass() + " has no field of type " + simpleName);
    }
}
