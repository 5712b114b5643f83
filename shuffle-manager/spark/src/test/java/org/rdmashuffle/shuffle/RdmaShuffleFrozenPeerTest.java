package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.IntStream;
import java.util.zip.CRC32;
import org.apache.spark.FetchFailed;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Tuple2;

/**
 * A serving executor frozen (SIGSTOP) while reducers on two other executors READ its map outputs:
 * their READs time out within {@code requestTimeout}, every fetch failure names the frozen executor —
 * never a healthy one, whose outputs Spark would then drop — and once it runs again (SIGCONT) the
 * job ends with every record right. A frozen executor whose node left the driver's directory before its
 * READs failed is not blamed at all: its blocks come through Spark's path once it runs again.
 */
class RdmaShuffleFrozenPeerTest {
    private static final int MAPS = 6;
    private static final int PARTITIONS = 12;
    private static final int RECORDS_PER_MAP = 1_200;
    /** 100 values of 2 KiB per block: about 200 KiB, streamed through windows of {@code pool.maxBufferSize}=16k. */
    private static final int VALUE_BYTES = 2_048;
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

    /**
     * Issue 33, defect 1: a failed window of a streamed block blamed its peer without asking whether the peer
     * withdrew its node (only failed requests asked). Every healthy executor has the peer's node cached from a
     * first run; the node leaves the driver's directory (as a failed node withdraws itself); in the second run a
     * reducer freezes the peer as soon as it decodes the first record of one of its blocks, all of which are
     * larger than the pool's largest buffer: the windows still to come fail against a node that is gone.
     */
    @Test
    @Timeout(300)
    void shouldBlameNobodyWhenAStreamedBlocksWindowFailsAfterItsPeerWithdrewItsNode() throws Exception {
        LocalCluster.assumeKill();
        SparkConf conf = conf(true).set("spark.shuffle.rdma.pool.maxBufferSize", "16k");
        try (LocalCluster cluster = new LocalCluster(conf)) {
            JavaPairRDD<Integer, byte[]> shuffled = taggedRecords(cluster.sc)
                    .partitionBy(new HashPartitioner(PARTITIONS));
            List<String> expected = expectedDigests();
            assertEquals(expected, taggedDigests(shuffled, "", -1, "")); // every executor READ every other
            String frozen = LocalCluster.holdingOutputs(cluster.probe(3));
            long pid = cluster.executorPids(3).get(frozen);
            int failuresBefore = cluster.recorder.fetchFailures.size();
            Path once = Files.createTempDirectory("frozen-peer-").resolve("frozen");
            // its node withdrawn from the driver's directory; the readers still hold it cached
            new NodeDirectory.Client(cluster.sc.getConf(), SparkEnv.get().rpcEnv()).forget(frozen);
            AtomicBoolean done = new AtomicBoolean();
            AtomicBoolean wasFrozen = new AtomicBoolean();
            Thread thaw = new Thread(() -> {
                try {
                    while (!done.get() && !stopped(pid)) {
                        Thread.sleep(50);
                    }
                    if (stopped(pid)) {
                        wasFrozen.set(true);
                        Thread.sleep(10_000);
                    }
                    LocalCluster.signal("CONT", pid);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            thaw.start();
            List<String> got;
            try {
                got = taggedDigests(shuffled, frozen, pid, once.toString());
            } finally {
                done.set(true);
                thaw.join();
                Files.deleteIfExists(once);
                Files.delete(once.getParent());
            }
            cluster.drainEvents();
            assertTrue(wasFrozen.get(), "no reducer froze executor " + frozen);
            assertEquals(expected, got);
            List<FetchFailed> failures = cluster.recorder.fetchFailures.subList(failuresBefore,
                    cluster.recorder.fetchFailures.size());
            assertTrue(failures.isEmpty(), "an executor that withdrew its node was blamed: "
                    + failures.stream().map(f -> f.bmAddress() + ": " + f.message()).toList());
        }
    }

    /** Whether this call created {@code file} (executors of a local cluster share the file system). */
    private static boolean firstToCreate(Path file) throws java.io.IOException {
        try {
            Files.createFile(file);
            return true;
        } catch (java.nio.file.FileAlreadyExistsException e) {
            return false;
        }
    }

    /** Whether process {@code pid} is stopped (state T in /proc). */
    private static boolean stopped(long pid) throws java.io.IOException {
        String stat = Files.readString(Path.of("/proc", Long.toString(pid), "stat"));
        return stat.substring(stat.lastIndexOf(')') + 2).startsWith("T");
    }

    /** The records' value {@code j} of map {@code m}; its first byte is left for the executor that wrote it. */
    private static byte[] value(int m, int j) {
        byte[] v = new byte[VALUE_BYTES];
        new SplittableRandom((long) m * RECORDS_PER_MAP + j).nextBytes(v);
        return v;
    }

    private static int key(int m, int j) {
        return (int) ((((long) m * RECORDS_PER_MAP + j) * 7919) % 5000);
    }

    /** Records whose value's first byte names the executor that wrote them. */
    private static JavaPairRDD<Integer, byte[]> taggedRecords(JavaSparkContext sc) {
        return sc.parallelize(IntStream.range(0, MAPS).boxed().toList(), MAPS).flatMapToPair(m -> {
            byte tag = (byte) Integer.parseInt(SparkEnv.get().executorId());
            List<Tuple2<Integer, byte[]>> out = new ArrayList<>(RECORDS_PER_MAP);
            for (int j = 0; j < RECORDS_PER_MAP; j++) {
                byte[] v = value(m, j);
                v[0] = tag;
                out.add(new Tuple2<>(key(m, j), v));
            }
            return out.iterator();
        });
    }

    private static long digest(int key, byte[] v) {
        CRC32 crc = new CRC32();
        crc.update(v, 1, v.length - 1);
        return (crc.getValue() ^ ((long) key << 32)) * 0x9E3779B97F4A7C15L + v.length;
    }

    /** Per partition: its index, how many records and an order-independent digest (the writer's tag left out). */
    private static List<String> expectedDigests() {
        long[] n = new long[PARTITIONS];
        long[] sum = new long[PARTITIONS];
        for (int m = 0; m < MAPS; m++) {
            for (int j = 0; j < RECORDS_PER_MAP; j++) {
                int p = Math.floorMod(Integer.hashCode(key(m, j)), PARTITIONS);
                n[p]++;
                sum[p] += digest(key(m, j), value(m, j));
            }
        }
        return IntStream.range(0, PARTITIONS).mapToObj(p -> p + ":" + n[p] + ":" + sum[p]).toList();
    }

    /**
     * As {@link #expectedDigests()}, of {@code shuffled}; a reducer outside executor {@code freeze} that decodes a
     * record written there freezes that executor (process {@code pid}) first — the first one to create the file
     * {@code once} (a task retried, or reading through Spark's path once the executor runs again, does not).
     */
    private static List<String> taggedDigests(JavaPairRDD<Integer, byte[]> shuffled, String freeze, long pid,
                                              String once) {
        return shuffled.mapPartitionsWithIndex((index, it) -> {
            boolean mayFreeze = pid > 0 && !SparkEnv.get().executorId().equals(freeze);
            byte frozenTag = pid > 0 ? (byte) Integer.parseInt(freeze) : 0;
            long n = 0;
            long sum = 0;
            while (it.hasNext()) {
                Tuple2<Integer, byte[]> r = it.next();
                if (mayFreeze && r._2()[0] == frozenTag) {
                    mayFreeze = false;
                    if (firstToCreate(Path.of(once))) {
                        LocalCluster.signal("STOP", pid); // mid-block: its next windows are READ from a frozen peer
                    }
                }
                sum += digest(r._1(), r._2());
                n++;
            }
            return List.of(index + ":" + n + ":" + sum).iterator();
        }, true).collect();
    }
}
