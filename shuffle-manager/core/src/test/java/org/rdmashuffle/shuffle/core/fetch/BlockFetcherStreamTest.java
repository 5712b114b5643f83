package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.CONF;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.eventually;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.serve.RegisteredMapOutput;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;

/** Blocks larger than the pool's largest buffer stream through a bounded window of pooled buffers ({@link BlockStream}). */
class BlockFetcherStreamTest {
    /** A pool whose largest buffer is 64 KiB (in chunks of 256 KiB): blocks above it stream. */
    private static final RdmaShuffleConf SMALL_POOL = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
            "spark.shuffle.rdma.pool.leakDetection", "paranoid", "spark.shuffle.rdma.pool.maxBufferSize", "64k",
            "spark.shuffle.rdma.pool.chunkSize", "256k"));

    private static final int WINDOW = 64 << 10;

    /**
     * One map output of three partitions — small, 11 windows and a bit, small — registered as regions
     * of 100,000 bytes, so windows cross region boundaries.
     */
    private static RegisteredOutputTable publishLarge(RdmaNode executor, Path dir, int shuffleId, byte[] data,
                                                   long[] offsets) throws Exception {
        new SplittableRandom(shuffleId).nextBytes(data);
        Path f = dir.resolve("shuffle_" + shuffleId + "_0_0.data");
        Files.write(f, data);
        RegisteredOutputTable table = new RegisteredOutputTable(executor, shuffleId, 1);
        table.publish(0, 0, RegisteredMapOutput.register(executor, f, new MapOutputLayout(offsets, 100_000)));
        return table;
    }

    @Test
    @Timeout(120)
    void shouldStreamABlockLargerThanThePoolsLargestBufferByteForByteThroughABoundedWindowOfPooledBuffers(
            @TempDir Path dir) throws Exception {
        byte[] data = new byte[11 * WINDOW + 5_000 + 30_000];
        long[] offsets = {0, 5_000, 5_000 + 11 * WINDOW + 77, data.length};
        try (RdmaNode executor = RdmaTransport.open(SMALL_POOL, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(SMALL_POOL, NodeOptions.loopback());
             RegisteredOutputTable table = publishLarge(executor, dir, 20, data, offsets);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(SMALL_POOL), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 16 << 10, 20_000)) {
            BlockFetcher.Request single = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0,
                    1, 2);
            BlockFetcher.Request run = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, 0,
                    3);
            fetcher.add(single);
            fetcher.add(run);
            SplittableRandom sizes = new SplittableRandom(5);
            long maxHeld = 0;
            int got = 0;
            while (fetcher.outstanding() > 0) {
                try (BlockFetcher.Block b = fetcher.next()) {
                    BlockFetcher.Request r = b.request();
                    long from = offsets[r.startPartition()];
                    assertEquals(offsets[r.endPartition()] - from, b.length(), "length of " + r);
                    assertTrue(b.streamed(), "a block of " + b.length() + " bytes in one buffer of the pool");
                    assertThrows(IllegalStateException.class, b::bytes);
                    for (int p = r.startPartition(); p < r.endPartition(); p++) {
                        long pf = b.offsetOf(p);
                        long pt = b.offsetOf(p + 1);
                        assertEquals(offsets[p] - from, pf, "partition " + p + " of " + r);
                        java.io.ByteArrayOutputStream got1 = new java.io.ByteArrayOutputStream();
                        java.io.InputStream in = b.open(pf, pt);
                        byte[] chunk = new byte[40_000];
                        for (;;) {
                            maxHeld = Math.max(maxHeld, pool.stats().inUseBuffers());
                            if (sizes.nextInt(4) == 0) { // byte by byte now and then
                                int v = in.read();
                                if (v < 0) {
                                    break;
                                }
                                got1.write(v);
                                continue;
                            }
                            int n = in.read(chunk, 0, 1 + sizes.nextInt(chunk.length));
                            if (n < 0) {
                                break;
                            }
                            got1.write(chunk, 0, n);
                        }
                        assertEquals(-1, ByteBuffer.wrap(got1.toByteArray()).mismatch(
                                ByteBuffer.wrap(data, (int) offsets[p], (int) (offsets[p + 1] - offsets[p]))),
                                "bytes of partition " + p + " of " + r);
                    }
                    got++;
                }
            }
            assertEquals(2, got);
            // byte-exactness through one read loop per block
            fetcher.add(run);
            try (BlockFetcher.Block b = fetcher.next()) {
                java.io.InputStream in = b.open(0, b.length());
                byte[] all = new byte[(int) b.length()];
                int at = 0;
                while (at < all.length) {
                    int n = in.read(all, at, Math.min(all.length - at, 1 + sizes.nextInt(100_000)));
                    assertTrue(n > 0, "stream ended at " + at + " of " + all.length);
                    at += n;
                    maxHeld = Math.max(maxHeld, pool.stats().inUseBuffers());
                }
                assertEquals(-1, in.read());
                assertEquals(-1, ByteBuffer.wrap(all).mismatch(ByteBuffer.wrap(data)), "bytes of the streamed block");
            }
            // partitions opened in order, each partly read: the rest is skipped, the next starts right
            fetcher.add(run);
            try (BlockFetcher.Block b = fetcher.next()) {
                for (int p = 0; p < 3; p++) {
                    java.io.InputStream in = b.open(b.offsetOf(p), b.offsetOf(p + 1));
                    byte[] head = in.readNBytes(100);
                    assertEquals(-1, ByteBuffer.wrap(head).mismatch(ByteBuffer.wrap(data, (int) offsets[p], 100)),
                            "head of partition " + p);
                    maxHeld = Math.max(maxHeld, pool.stats().inUseBuffers());
                }
                assertThrows(IllegalStateException.class, () -> b.open(0, 10), "read backwards");
            }
            assertTrue(maxHeld <= BlockStream.STREAM_WINDOWS, "window buffers held at once: " + maxHeld);
            assertTrue(maxHeld >= 2, "the stream never READ ahead: " + maxHeld);
            assertEquals(0, fetcher.bytesInFlight());
            assertEquals(0, pool.stats().inUseBuffers());
            assertEquals(0, pool.stats().leaksDetected());
            // every window came from the pool's chunks: no fresh registration of the block's size
            assertTrue(pool.stats().registeredBytes() <= 2L * (256 << 10), "registered: " + pool.stats());
        }
    }

    @Test
    @Timeout(120)
    void shouldFailTheFetchNamingTheBlockAndReturnEveryBufferWhenAWindowReadFailsMidStream(@TempDir Path dir)
            throws Exception {
        byte[] data = new byte[20 * WINDOW];
        long[] offsets = {0, data.length};
        RdmaNode executor = RdmaTransport.open(SMALL_POOL, NodeOptions.loopback());
        try (RdmaNode reducer = RdmaTransport.open(SMALL_POOL, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(SMALL_POOL), reducer.sinkRegistrar())) {
            RegisteredOutputTable table = publishLarge(executor, dir, 21, data, offsets);
            BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 16 << 10, 20_000);
            BlockFetcher.Request r = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, 0, 1);
            fetcher.add(r);
            BlockFetcher.Block b = fetcher.next();
            assertTrue(b.streamed());
            java.io.InputStream in = b.open(0, b.length());
            byte[] first = in.readNBytes(WINDOW + 10); // two windows taken, more in flight
            assertEquals(-1, ByteBuffer.wrap(first).mismatch(ByteBuffer.wrap(data, 0, first.length)));
            table.close();
            executor.close(); // the serving executor goes mid-stream
            BlockFetcher.StreamFailed failed = assertThrows(BlockFetcher.StreamFailed.class, () -> {
                byte[] rest = new byte[8192];
                while (in.read(rest, 0, rest.length) >= 0) {
                    // read on until a window READ fails
                }
            });
            assertEquals(r, failed.failure().request(), "the failure names the block");
            assertTrue(failed.getMessage().contains("map index 0"), failed.getMessage());
            assertThrows(BlockFetcher.StreamFailed.class, in::read, "a failed stream fails again");
            b.close();
            fetcher.close();
            assertTrue(eventually(60, () -> pool.stats().inUseBuffers() == 0),
                    "window buffers still held after the failure: " + pool.stats());
            assertEquals(0, pool.stats().leaksDetected());
        } finally {
            executor.close();
        }
    }

    @Test
    @Timeout(120)
    void shouldReturnEveryWindowBufferWhenAStreamedBlockOrItsFetcherIsClosedMidStream(@TempDir Path dir)
            throws Exception {
        byte[] data = new byte[20 * WINDOW];
        long[] offsets = {0, 10 * WINDOW + 3, data.length};
        try (RdmaNode executor = RdmaTransport.open(SMALL_POOL, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(SMALL_POOL, NodeOptions.loopback());
             RegisteredOutputTable table = publishLarge(executor, dir, 22, data, offsets);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(SMALL_POOL), reducer.sinkRegistrar())) {
            BlockFetcher.Request p0 = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, 0, 1);
            BlockFetcher.Request p1 = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, 1, 2);
            try (BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 16 << 10, 20_000)) {
                // the block closed mid-stream, the fetcher goes on: its windows in flight come back as they land
                fetcher.add(p0);
                BlockFetcher.Block b = fetcher.next();
                b.open(0, b.length()).readNBytes(1000);
                b.close();
                fetcher.add(p1);
                try (BlockFetcher.Block c = fetcher.next()) {
                    byte[] all = c.open(0, c.length()).readAllBytes();
                    assertEquals(-1, ByteBuffer.wrap(all).mismatch(
                            ByteBuffer.wrap(data, (int) offsets[1], (int) (offsets[2] - offsets[1]))));
                }
                assertEquals(0, fetcher.readsInFlight());
                assertEquals(0, fetcher.bytesInFlight(), "windows of the closed block still counted");
                assertEquals(0, pool.stats().inUseBuffers());
            }
            // the fetcher closed mid-stream (a task ending early), its block never closed
            BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 16 << 10, 20_000);
            fetcher.add(p0);
            BlockFetcher.Block b = fetcher.next();
            b.open(0, b.length()).readNBytes(WINDOW + 1);
            fetcher.close();
            assertThrows(IllegalStateException.class, () -> b.open(0, b.length()).read());
            b.close();
            assertTrue(eventually(60, () -> pool.stats().inUseBuffers() == 0),
                    "window buffers still held after close: " + pool.stats());
            assertEquals(0, pool.stats().leaksDetected());
        }
    }

    @Test
    @Timeout(180)
    void shouldStreamTwoBlocksFromTwoPeersAtOnceInOneFetcherAndInTwoFetchersSharingAPoolAtItsCap(@TempDir Path dir)
            throws Exception {
        byte[] a = new byte[9 * WINDOW + 123];
        byte[] b = new byte[7 * WINDOW + 4_567];
        // the pool holds 5 windows at most (and a chunk for the small classes): two streams of 3 wait for each other
        RdmaShuffleConf capped = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.pool.leakDetection", "paranoid", "spark.shuffle.rdma.pool.maxBufferSize", "64k",
                "spark.shuffle.rdma.pool.chunkSize", "64k", "spark.shuffle.rdma.pool.maxRegisteredBytes", "384k"));
        try (RdmaNode peerA = RdmaTransport.open(SMALL_POOL, NodeOptions.loopback());
             RdmaNode peerB = RdmaTransport.open(SMALL_POOL, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(capped, NodeOptions.loopback());
             RegisteredOutputTable ta = publishLarge(peerA, dir, 30, a, new long[] {0, a.length});
             RegisteredOutputTable tb = publishLarge(peerB, dir, 31, b, new long[] {0, b.length});
             BufferPool pool = new BufferPool(BufferPoolOptions.from(capped), reducer.sinkRegistrar())) {
            BlockFetcher.Request ra = new BlockFetcher.Request(peerA.localAddress(), ta.descriptor(), 0, 0, 0, 1);
            BlockFetcher.Request rb = new BlockFetcher.Request(peerB.localAddress(), tb.descriptor(), 0, 0, 0, 1);
            // one fetcher, both blocks open at once, read in turns
            try (BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 16 << 10, 20_000)) {
                fetcher.add(ra);
                fetcher.add(rb);
                BlockFetcher.Block first = fetcher.next();
                BlockFetcher.Block second = fetcher.next();
                BlockFetcher.Block ba = first.request().equals(ra) ? first : second;
                BlockFetcher.Block bb = ba == first ? second : first;
                assertTrue(ba.streamed() && bb.streamed());
                java.io.InputStream ia = ba.open(0, ba.length());
                java.io.InputStream ib = bb.open(0, bb.length());
                java.io.ByteArrayOutputStream ga = new java.io.ByteArrayOutputStream();
                java.io.ByteArrayOutputStream gb = new java.io.ByteArrayOutputStream();
                byte[] chunk = new byte[50_000];
                boolean doneA = false;
                boolean doneB = false;
                while (!doneA || !doneB) {
                    if (!doneA) {
                        int n = ia.read(chunk, 0, chunk.length);
                        if (n < 0) {
                            doneA = true;
                        } else {
                            ga.write(chunk, 0, n);
                        }
                    }
                    if (!doneB) {
                        int n = ib.read(chunk, 0, 30_000);
                        if (n < 0) {
                            doneB = true;
                        } else {
                            gb.write(chunk, 0, n);
                        }
                    }
                }
                assertEquals(-1, ByteBuffer.wrap(ga.toByteArray()).mismatch(ByteBuffer.wrap(a)), "block of peer A");
                assertEquals(-1, ByteBuffer.wrap(gb.toByteArray()).mismatch(ByteBuffer.wrap(b)), "block of peer B");
                ba.close();
                bb.close();
                assertEquals(0, fetcher.bytesInFlight());
                assertEquals(0, pool.stats().inUseBuffers());
            }
            // two fetchers (two tasks) streaming at once from the two peers through a pool at its cap
            ExecutorService tasks = Executors.newFixedThreadPool(2);
            try {
                List<Future<byte[]>> got = new ArrayList<>();
                for (BlockFetcher.Request r : List.of(ra, rb, ra, rb)) {
                    got.add(tasks.submit(() -> {
                        try (BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 16 << 10, 20_000)) {
                            fetcher.add(r);
                            try (BlockFetcher.Block blk = fetcher.next()) {
                                java.io.InputStream in = blk.open(0, blk.length());
                                java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
                                byte[] buf = new byte[20_000];
                                for (int n; (n = in.read(buf, 0, buf.length)) >= 0; ) {
                                    out.write(buf, 0, n);
                                    Thread.onSpinWait(); // a slow reader
                                }
                                return out.toByteArray();
                            }
                        }
                    }));
                }
                for (int i = 0; i < got.size(); i++) {
                    byte[] expected = i % 2 == 0 ? a : b;
                    assertEquals(-1, ByteBuffer.wrap(got.get(i).get(120, TimeUnit.SECONDS))
                            .mismatch(ByteBuffer.wrap(expected)), "stream " + i);
                }
            } finally {
                tasks.shutdownNow();
            }
            assertTrue(eventually(60, () -> pool.stats().inUseBuffers() == 0), "buffers held: " + pool.stats());
            assertEquals(0, pool.stats().leaksDetected());
        }
    }

    @Test
    @Timeout(300)
    void shouldStreamABlockOfOver2GibWithLongOffsetsThroughThePoolsLargestBuffers(@TempDir Path dir) throws Exception {
        // a sparse file: zeros but for marks at either side of the 1 GiB region boundaries and past 2 GiB
        long length = (2L << 30) + 12_345;
        long[] marks = {100, (1L << 30) - 3, (2L << 30) - 5, (2L << 30) + 7, length - 8};
        Path f = dir.resolve("shuffle_23_0_0.data");
        try (java.io.RandomAccessFile raf = new java.io.RandomAccessFile(f.toFile(), "rw")) {
            raf.setLength(length);
            for (long m : marks) {
                raf.seek(m);
                raf.writeLong(m ^ 0x5A5A5A5A5A5A5A5AL);
            }
        }
        long[] offsets = {0, 50, length};
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             RegisteredOutputTable table = new RegisteredOutputTable(executor, 23, 1);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 64 << 20, 1 << 20, 60_000)) {
            table.publish(0, 0, RegisteredMapOutput.register(executor, f, new MapOutputLayout(offsets, 1 << 30)));
            fetcher.add(new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, 1, 2));
            long registered;
            try (BlockFetcher.Block b = fetcher.next()) {
                assertEquals(length - 50, b.length());
                assertTrue(b.streamed());
                java.io.InputStream in = b.open(0, b.length());
                byte[] chunk = new byte[3 << 20];
                byte[] zeros = new byte[chunk.length];
                long pos = 50; // in the file
                long maxHeld = 0;
                for (int n; (n = in.read(chunk, 0, chunk.length)) > 0; pos += n) {
                    for (long m : marks) { // check and blank each mark in this chunk
                        for (int k = 0; k < 8; k++) {
                            long at = m + k - pos;
                            if (at >= 0 && at < n) {
                                assertEquals((byte) ((m ^ 0x5A5A5A5A5A5A5A5AL) >>> (56 - 8 * k)), chunk[(int) at],
                                        "byte " + (m + k));
                                chunk[(int) at] = 0;
                            }
                        }
                    }
                    assertEquals(-1, java.util.Arrays.mismatch(chunk, 0, n, zeros, 0, n), "bytes from " + pos);
                    maxHeld = Math.max(maxHeld, pool.stats().inUseBuffers());
                }
                assertEquals(length, pos, "the stream ended early");
                assertTrue(maxHeld <= BlockStream.STREAM_WINDOWS, "window buffers held at once: " + maxHeld);
                registered = pool.stats().registeredBytes();
            }
            // a chunk for the slot and metadata classes and one of the largest class: never the block's size
            long chunk = CONF.poolChunkSizeBytes();
            assertTrue(registered % chunk == 0 && registered <= 4 * chunk, "registered for a 2 GiB block: " + registered);
            assertEquals(0, pool.stats().inUseBuffers());
            assertEquals(0, fetcher.bytesInFlight());
        }
    }
}
