package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.HashPartitioner;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.shuffle.IndexShuffleBlockResolver;
import org.apache.spark.storage.BlockId;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.storage.ShuffleBlockId;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Tuple2;
import scala.Tuple3;
import scala.collection.JavaConverters;

/**
 * Where Spark's own reader behaves in a way its tests look at, rdma-shuffle behaves the same, on every Spark
 * line: blocks of another executor on the same host are read from its disk, not READ
 * ({@code spark.shuffle.readHostLocalDisk}), and a corrupt block's cause is found with Spark's shuffle
 * checksums and named in Spark's words ({@code DISK_ISSUE}, {@code NETWORK_ISSUE}). (Batch fetch of AQE's
 * coalesced partitions is checked in {@link SparkLineCoreSetTest}, on its cluster.)
 */
class SparkLikeReadsTest {

    private static Object groupByKey(LocalCluster c) {
        return new TreeMap<>(ShuffleJobs.pairs(c.sc, 60_000, 6, 2_000).groupByKey(5).mapValues(ShuffleJobs::digest)
                .collectAsMap());
    }

    /** Blocks and bytes the stages since {@code from} fetched: {local blocks, remote blocks, local bytes, remote bytes}. */
    static long[] fetched(LocalCluster c, int from) {
        long[] sum = new long[4];
        for (LocalCluster.StageShuffle s : c.stagesSince(from)) {
            sum[0] += s.localBlocks();
            sum[1] += s.remoteBlocks();
            sum[2] += s.localBytesRead();
            sum[3] += s.remoteBytesRead();
        }
        return sum;
    }

    @Test
    @Timeout(300)
    void shouldReadAnotherExecutorsBlocksOnThisHostFromItsDiskAndCountThemLocalAsSparkDoes() {
        Object expected;
        long[] sort;
        try (LocalCluster s = LocalCluster.inProcess(LocalCluster.conf(false))) {
            int from = s.stagesCompleted();
            expected = groupByKey(s);
            sort = fetched(s, from); // one executor: every block local
        }
        SparkConf conf = LocalCluster.conf(true).set("spark.shuffle.readHostLocalDisk", "true"); // Spark's default
        try (LocalCluster c = new LocalCluster(conf)) {
            Map<String, LocalCluster.ExecutorProbe> before = c.probe();
            int from = c.stagesCompleted();
            assertEquals(expected, groupByKey(c));
            long[] rdma = fetched(c, from);
            Map<String, LocalCluster.ExecutorProbe> after = c.probe();
            assertTrue(sort[0] > 0 && sort[1] == 0, "the in-process run fetched remote blocks: "
                    + java.util.Arrays.toString(sort));
            assertEquals(sort[0], rdma[0], "local blocks (own and host-local) against Spark's in one process");
            assertEquals(sort[2], rdma[2], "local bytes (own and host-local) against Spark's in one process");
            assertEquals(0, rdma[1], "blocks fetched as remote though every executor is on this host");
            assertEquals(0, LocalCluster.growth(before, after, st -> st.node().readsCompleted()),
                    "blocks of an executor on the same host were READ: " + after);
            assertTrue(LocalCluster.growth(before, after, RdmaShuffleManager.ExecutorStats::hostLocalBlocks) > 0,
                    "no block counted as read from another executor's disk: " + after);
        }
    }

    @Test
    @Timeout(300)
    void shouldNameTheCauseOfACorruptBlockInSparksWordsAfterAskingTheExecutorThatWroteIt() throws IOException {
        try (LocalCluster c = LocalCluster.inProcess(LocalCluster.conf(true))) {
            JavaPairRDD<Integer, byte[]> shuffled = RdmaShuffleTaskEndTest.records(c.sc)
                    .partitionBy(new HashPartitioner(4));
            assertEquals(200_000, shuffled.count()); // the map outputs, committed with their checksums
            int shuffleId = ((ShuffleDependency<?, ?, ?>) shuffled.rdd().dependencies().head()).shuffleId();
            SparkEnv env = SparkEnv.get(); // in process: the driver is the executor that wrote them
            Tuple2<BlockManagerId, Tuple3<BlockId, Object, Object>> first = firstBlock(env, shuffleId);
            BlockManagerId writer = first._1();
            ShuffleBlockId id = (ShuffleBlockId) first._2()._1();
            IndexShuffleBlockResolver resolver = (IndexShuffleBlockResolver) env.shuffleManager().shuffleBlockResolver();
            ByteBuffer onDisk = copy(resolver.getBlockData(id, scala.Option.empty()).nioByteBuffer());
            assertTrue(onDisk.remaining() > 64, "block too small to corrupt: " + onDisk.remaining());

            CorruptionDiagnosis diagnosis = new CorruptionDiagnosis(env);
            assertEquals("Block " + id + " is corrupted but checksum verification passed",
                    diagnosis.diagnose(writer, id, onDisk));
            ByteBuffer damaged = copy(onDisk);
            damaged.put(damaged.remaining() / 2, (byte) (damaged.get(damaged.remaining() / 2) ^ 0x5A));
            assertEquals("Block " + id + " is corrupted due to NETWORK_ISSUE", diagnosis.diagnose(writer, id, damaged),
                    "bytes damaged on the way, the disk right");
            assertEquals("Block " + id + " is corrupted due to NETWORK_ISSUE",
                    diagnosis.diagnose(writer, id, () -> new java.io.ByteArrayInputStream(bytes(damaged))),
                    "the same, from a stream");

            flipOnDisk(resolver.getDataFile(shuffleId, id.mapId()), resolver, id, onDisk.remaining() / 2);
            assertEquals("Block " + id + " is corrupted due to DISK_ISSUE", diagnosis.diagnose(writer, id, damaged),
                    "the byte flipped on disk after the writer's checksum");

            SparkConf off = env.conf().clone().set("spark.shuffle.checksum.enabled", "false");
            assertNull(new CorruptionDiagnosis(env, off).diagnose(writer, id, damaged), "no checksums, no diagnosis");
            assertNotNull(diagnosis.notDiagnosed(id, "a batch"));
        }
    }

    private static Tuple2<BlockManagerId, Tuple3<BlockId, Object, Object>> firstBlock(SparkEnv env, int shuffleId) {
        var byAddress = env.mapOutputTracker().getMapSizesByExecutorId(shuffleId, 0, Integer.MAX_VALUE, 0, 4);
        while (byAddress.hasNext()) {
            var e = byAddress.next();
            for (Tuple3<BlockId, Object, Object> b : JavaConverters.seqAsJavaList(e._2())) {
                if ((Long) b._2() > 1024) {
                    return new Tuple2<>(e._1(), b);
                }
            }
        }
        throw new AssertionError("no block over 1 KiB in shuffle " + shuffleId);
    }

    /** Flips the byte at {@code at} of block {@code id} in its map output's data file. */
    private static void flipOnDisk(File data, IndexShuffleBlockResolver resolver, ShuffleBlockId id, int at)
            throws IOException {
        long start = resolver.getBlockData(id, scala.Option.empty()).size(); // only to fail early on a missing file
        assertTrue(start > at);
        try (RandomAccessFile f = new RandomAccessFile(resolver.getIndexFile(id.shuffleId(), id.mapId(),
                scala.Option.empty()), "r"); RandomAccessFile d = new RandomAccessFile(data, "rw")) {
            f.seek(8L * id.reduceId());
            long offset = f.readLong() + at;
            d.seek(offset);
            int b = d.read();
            d.seek(offset);
            d.write(b ^ 0x5A);
            d.getFD().sync();
        }
    }

    private static ByteBuffer copy(ByteBuffer b) {
        ByteBuffer c = ByteBuffer.allocate(b.remaining());
        c.put(b.duplicate()).flip();
        return c;
    }

    private static byte[] bytes(ByteBuffer b) {
        byte[] a = new byte[b.remaining()];
        b.duplicate().get(a);
        return a;
    }
}
