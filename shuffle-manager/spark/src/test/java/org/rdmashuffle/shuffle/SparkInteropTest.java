package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import org.apache.spark.FetchFailed;
import org.apache.spark.SparkConf;
import org.apache.spark.serializer.JavaSerializer;
import org.apache.spark.serializer.KryoSerializer;
import org.apache.spark.serializer.Serializer;
import org.apache.spark.serializer.SerializationStream;
import org.apache.spark.serializer.SerializerManager;
import org.apache.spark.shuffle.FetchFailedException;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.storage.ShuffleBlockId;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import scala.Option;
import scala.Tuple2;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

class SparkInteropTest {

    @ParameterizedTest(name = "{0} serializer, compression {1}")
    @CsvSource({"kryo,off", "kryo,lz4", "kryo,zstd", "java,off", "java,lz4", "java,zstd"})
    void shouldDecodeRecordsFromFetchedBytesAsSparkWroteThem(String serializerName, String codec) throws Exception {
        SparkConf conf = new SparkConf(false).set("spark.shuffle.compress", Boolean.toString(!codec.equals("off")));
        if (!codec.equals("off")) {
            conf.set("spark.io.compression.codec", codec);
        }
        Serializer serializer = serializerName.equals("kryo") ? new KryoSerializer(conf) : new JavaSerializer(conf);
        SerializerManager sm = new SerializerManager(serializer, conf);
        ShuffleBlockId block = new ShuffleBlockId(3, 17L, 4);

        ByteArrayOutputStream raw = new ByteArrayOutputStream();
        OutputStream wrapped = sm.wrapStream(block, raw);
        SerializationStream out = serializer.newInstance().serializeStream(wrapped);
        ClassTag<Object> any = ClassTag$.MODULE$.Any();
        for (int i = 0; i < 10_000; i++) {
            out.writeKey("key-" + (i % 97), any);
            out.writeValue(i, any);
        }
        out.close();
        byte[] written = raw.toByteArray();
        ByteBuffer fetched = ByteBuffer.allocateDirect(written.length).put(written).flip();

        scala.collection.Iterator<Tuple2<String, Integer>> it = SparkInterop.records(sm, serializer.newInstance(), block, fetched);
        int n = 0;
        while (it.hasNext()) {
            Tuple2<String, Integer> kv = it.next();
            assertEquals("key-" + (n % 97), kv._1());
            assertEquals(n, kv._2().intValue());
            n++;
        }
        assertEquals(10_000, n);
        assertFalse(fetched.hasRemaining(), "every fetched byte was consumed");
    }

    @Test
    void shouldNameMapAndReducePartitionWhenFetchFails() {
        BlockManagerId bm = BlockManagerId.apply("exec-2", "10.0.0.2", 7337, Option.empty());
        FetchFailure cause = new FetchFailure(null, "data READ failed: connection lost (map index 5 at tcp://h:1)",
                null);
        FetchFailedException e = SparkInterop.fetchFailed(bm, 3, 42L, 5, 9, cause);
        assertTrue(e.getMessage().contains("connection lost"), e.getMessage());
        assertSame(cause, e.getCause());
        FetchFailed reason = (FetchFailed) e.toTaskFailedReason();
        assertEquals(bm, reason.bmAddress());
        assertEquals(3, reason.shuffleId());
        assertEquals(42L, reason.mapId());
        assertEquals(5, reason.mapIndex());
        assertEquals(9, reason.reduceId());
    }

    @ParameterizedTest(name = "{0} partitions")
    @CsvSource({"200", "3000"})
    void shouldBoundEveryBlockAtOrAboveItsSizeWhenAMapStatusReportsIt(int partitions) {
        SparkConf conf = new SparkConf(false);
        java.util.SplittableRandom rnd = new java.util.SplittableRandom(partitions);
        long[] sizes = new long[partitions];
        for (int p = 0; p < partitions; p++) {
            int kind = rnd.nextInt(10);
            sizes[p] = kind == 0 ? 0
                    : kind == 1 ? (long) Math.pow(1.1, 1 + rnd.nextInt(200)) + rnd.nextInt(3) - 1 // near a step
                    : kind == 2 ? (150L << 20) + rnd.nextLong(1L << 30) // above the accurate-size threshold
                    : 1 + rnd.nextLong(rnd.nextBoolean() ? 100 : 50L << 20);
            sizes[p] = Math.max(0, sizes[p]);
        }
        org.apache.spark.scheduler.MapStatus status = SparkLines.mapStatus(
                BlockManagerId.apply("exec-1", "host", 7337, Option.empty()), sizes, 5L);
        assertEquals(partitions > 2000, status instanceof org.apache.spark.scheduler.HighlyCompressedMapStatus,
                status.getClass().getName());
        for (int p = 0; p < partitions; p++) {
            long reported = status.getSizeForBlock(p);
            assertEquals(sizes[p] == 0, reported == 0, "partition " + p + ": " + sizes[p] + " reported as " + reported);
            if (reported == 0) {
                continue;
            }
            long most = SparkInterop.mostBytesOfBlock(reported, partitions, conf);
            assertTrue(sizes[p] <= most, "partition " + p + ": " + sizes[p] + " bytes, bound " + most);
            if (partitions <= 2000) {
                assertTrue(most <= sizes[p] + sizes[p] / 8 + 2, "partition " + p + ": loose bound " + most
                        + " for " + sizes[p] + " bytes");
            }
        }
    }

    @ParameterizedTest(name = "{0} partitions")
    @CsvSource({"200", "3000"})
    void shouldNeverGroupBlocksIntoARequestLargerThanABufferWhateverTheMapStatusReports(int partitions) {
        // A map output of 3000 partitions whose blocks are 20 MiB (reported as the map's average under a highly
        // compressed MapStatus, which can be far below) or a few bytes: grouped by their reported sizes, runs of
        // "small" blocks would hold many buffers' worth; grouped by the tracker's upper bounds, never.
        SparkConf conf = new SparkConf(false);
        long cap = 8L << 20;
        long[] sizes = new long[partitions];
        for (int p = 0; p < partitions; p++) {
            sizes[p] = p % 30 == 0 ? 20L << 20 : 1 + p % 7;
        }
        org.apache.spark.scheduler.MapStatus status = SparkLines.mapStatus(
                BlockManagerId.apply("exec-1", "host", 7337, Option.empty()), sizes, 5L);
        long[] bounds = new long[partitions];
        for (int p = 0; p < partitions; p++) {
            bounds[p] = SparkInterop.mostBytesOfBlock(status.getSizeForBlock(p), partitions, conf);
        }
        int[] ends = RdmaShuffleReader.runEnds(bounds, cap);
        int from = 0;
        int merged = 0;
        for (int to : ends) {
            assertTrue(to > from, java.util.Arrays.toString(ends));
            long real = 0;
            for (int p = from; p < to; p++) {
                real += sizes[p];
            }
            assertTrue(to - from == 1 || real <= cap, "blocks [" + from + ", " + to + ") hold " + real + " bytes");
            merged += to - from > 1 ? 1 : 0;
            from = to;
        }
        assertEquals(partitions, from);
        // With exact (compressed) statuses the small blocks between the large ones still share requests.
        assertEquals(partitions <= 2000, merged > 0, merged + " merged runs");
        // The hazard is real in this data: grouped by reported sizes (the map's average), a run of a highly
        // compressed status holds far more than a buffer.
        long[] reported = new long[partitions];
        for (int p = 0; p < partitions; p++) {
            reported[p] = status.getSizeForBlock(p);
        }
        long worst = 0;
        from = 0;
        for (int to : RdmaShuffleReader.runEnds(reported, cap)) {
            long real = 0;
            for (int p = from; p < to; p++) {
                real += sizes[p];
            }
            worst = Math.max(worst, to - from > 1 ? real : 0);
            from = to;
        }
        assertEquals(partitions > 2000, worst > cap, "largest merged run by reported sizes: " + worst + " bytes");
    }

    @org.junit.jupiter.api.Test
    void shouldCutRunsAtTheCapAndLetASingleOversizedBlockGoAlone() {
        assertArrayEquals(new int[] {2, 3, 4, 5}, RdmaShuffleReader.runEnds(new long[] {4, 4, 9, 1, Long.MAX_VALUE}, 8));
        assertArrayEquals(new int[] {1, 2}, RdmaShuffleReader.runEnds(new long[] {Long.MAX_VALUE, 1}, 8));
        assertArrayEquals(new int[0], RdmaShuffleReader.runEnds(new long[0], 8));
    }

    /** A stream whose bytes cannot come: reading it throws what a streamed block's failed window throws. */
    private static final class FailedWindow extends java.io.InputStream {
        final FetchFailedException failure = new FetchFailedException(BlockManagerId.apply("7", "peer", 9, Option.empty()),
                3, 17L, 2, 4, "window 2 of block shuffle_3_17_4 failed: connection lost", null);

        @Override
        public int read() {
            throw SparkInterop.sneakyThrow(failure);
        }

        @Override
        public int read(byte[] b, int off, int len) {
            throw SparkInterop.sneakyThrow(failure);
        }
    }

    @ParameterizedTest(name = "encryption {0}, compression {1}")
    @CsvSource({"true,lz4", "true,off", "false,snappy"})
    void shouldLetAFailedWindowsFetchFailureThroughDecodingNotTakeItForCorruption(boolean encrypt, String codec) {
        // Spark's wrappers that read at once (the crypto stream its IV, snappy its header, decoding ahead
        // into memory) meet the failed window while the reader decodes: it must stay the fetch failure it
        // is, not an IOException the reader takes for a corrupt block and READs again from a dead peer.
        SparkConf conf = new SparkConf(false).set("spark.shuffle.compress", Boolean.toString(!codec.equals("off")))
                .set("spark.io.encryption.enabled", Boolean.toString(encrypt));
        if (!codec.equals("off")) {
            conf.set("spark.io.compression.codec", codec);
        }
        Option<byte[]> key = encrypt ? Option.apply(new byte[16]) : Option.empty();
        SerializerManager sm = new SerializerManager(new KryoSerializer(conf), conf, key);
        ShuffleBlockId block = new ShuffleBlockId(3, 17L, 4);
        FailedWindow window = new FailedWindow();
        Throwable thrown = null;
        try {
            SparkInterop.decodeAhead(SparkInterop.decoded(sm, block, window), 1 << 20);
        } catch (Throwable t) {
            thrown = t;
        }
        assertSame(window.failure, thrown, "decoding a block whose window failed threw " + thrown);
    }
}
