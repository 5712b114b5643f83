package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.eventually;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.gatedNode;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.GatedChannel;
import org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.Outputs;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.serve.RegisteredMapOutput;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;

/**
 * A streamed block ({@link BlockStream}) against what goes wrong around it: its fetcher closing, a pool at its
 * cap with buffers held by blocks the task took up, other READs landing while its own window does not.
 */
class BlockStreamFaultsTest {
    private static final int WINDOW = 64 << 10;

    private static RdmaShuffleConf conf(String... more) {
        Map<String, String> m = new java.util.HashMap<>(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.pool.leakDetection", "paranoid", "spark.shuffle.rdma.pool.maxBufferSize", "64k",
                "spark.shuffle.rdma.pool.chunkSize", "256k"));
        for (int i = 0; i < more.length; i += 2) {
            m.put(more[i], more[i + 1]);
        }
        return new RdmaShuffleConf(m);
    }

    /** One map output with partitions of the given sizes, random bytes, in regions of 100,000 bytes. */
    private static RegisteredOutputTable publish(RdmaNode executor, Path dir, int shuffleId, long[] sizes, byte[][] data)
            throws Exception {
        long[] offsets = new long[sizes.length + 1];
        for (int p = 0; p < sizes.length; p++) {
            offsets[p + 1] = offsets[p] + sizes[p];
        }
        data[0] = new byte[(int) offsets[sizes.length]];
        new SplittableRandom(shuffleId).nextBytes(data[0]);
        Path f = dir.resolve("shuffle_" + shuffleId + "_0_0.data");
        Files.write(f, data[0]);
        RegisteredOutputTable table = new RegisteredOutputTable(executor, shuffleId, 1);
        table.publish(0, 0, RegisteredMapOutput.register(executor, f, new MapOutputLayout(offsets, 100_000)));
        return table;
    }

    @Test
    @Timeout(120)
    void shouldGiveBackAStreamedBlocksWindowsAndFailItsReadsWhenItsFetcherClosesBeforeTheBlock(@TempDir Path dir)
            throws Exception {
        RdmaShuffleConf conf = conf();
        byte[][] data = new byte[1][];
        try (RdmaNode executor = RdmaTransport.open(conf, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(conf, NodeOptions.loopback());
             RegisteredOutputTable table = publish(executor, dir, 40, new long[] {10L * WINDOW + 3}, data);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(conf), reducer.sinkRegistrar())) {
            BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 16 << 10, 20_000);
            fetcher.add(new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, 0, 1));
            BlockFetcher.Block b = fetcher.next();
            java.io.InputStream in = b.open(0, b.length());
            in.readNBytes(WINDOW + 1);
            fetcher.close(); // the block is not closed: a streamed block ends with its fetcher all the same
            assertTrue(eventually(60, () -> pool.stats().inUseBuffers() == 0),
                    "a closed fetcher's streamed block still holds window buffers: " + pool.stats());
            IllegalStateException e = assertThrows(IllegalStateException.class, in::read);
            assertTrue(e.getMessage().contains("fetcher closed"), e.getMessage());
            b.close();
            assertEquals(0, pool.stats().inUseBuffers());
            assertEquals(0, pool.stats().leaksDetected());
        }
    }

    @Test
    @Timeout(120)
    void shouldStreamToTheEndWhenBlocksTheTaskTookUpHoldThePoolAtItsCap(@TempDir Path dir) throws Exception {
        // Chunks of 256 KiB, one per size class, three at most: 4 KiB (slots, metadata, the tiny block), 16 KiB (the
        // sixteen small blocks fill it) and 64 KiB (windows, and the 40 KB block that keeps that chunk from being
        // taken back for another class). The streamed block's last window is 10,000 bytes: a 16 KiB buffer.
        RdmaShuffleConf conf = conf("spark.shuffle.rdma.pool.maxRegisteredBytes", "768k",
                "spark.shuffle.rdma.pool.acquireTimeout", "1s", "spark.shuffle.rdma.pool.threadCacheBuffers", "0");
        long[] sizes = new long[19];
        sizes[0] = 2L * WINDOW + 10_000; // streamed: 64 KiB, 64 KiB, 10,000 bytes
        sizes[1] = 1_000;
        sizes[2] = 40_000;
        for (int p = 3; p < sizes.length; p++) {
            sizes[p] = 10_000;
        }
        byte[][] data = new byte[1][];
        try (RdmaNode executor = RdmaTransport.open(conf, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(conf, NodeOptions.loopback());
             RegisteredOutputTable table = publish(executor, dir, 41, sizes, data);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(conf), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 4 << 20, 16 << 10, 60_000)) {
            fetcher.add(new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, 0, 1));
            assertTrue(eventually(60, () -> {
                fetcher.progress();
                return fetcher.readsInFlight() == 0;
            }), "the streamed block's metadata never landed");
            for (int p = 1; p < sizes.length; p++) {
                fetcher.add(new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, p, p + 1));
            }
            assertTrue(eventually(60, () -> {
                fetcher.progress(); // the other blocks land and are taken up: they hold their buffers until taken
                return fetcher.readsInFlight() == 0 && pool.stats().inUseBuffers() == sizes.length - 1;
            }), "the other blocks did not arrive: " + pool.stats());
            try (BlockFetcher.Block s = fetcher.next()) {
                assertTrue(s.streamed());
                byte[] all = s.open(0, s.length()).readAllBytes();
                assertEquals(-1, ByteBuffer.wrap(all).mismatch(ByteBuffer.wrap(data[0], 0, (int) sizes[0])),
                        "bytes of the streamed block");
            }
            for (int p = 1; p < sizes.length; p++) {
                try (BlockFetcher.Block b = fetcher.next()) {
                    int r = b.request().startPartition();
                    assertEquals(sizes[r], b.length(), "length of partition " + r);
                }
            }
            assertEquals(0, fetcher.outstanding());
        }
    }

    @Test
    @Timeout(120)
    void shouldFailAStreamWhoseWindowDoesNotLandInTimeWhileOtherReadsKeepLanding(@TempDir Path dir)
            throws Exception {
        RdmaShuffleConf conf = conf();
        byte[][] data = new byte[1][];
        try (RdmaNode executor = RdmaTransport.open(conf, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(conf, NodeOptions.loopback());
             RegisteredOutputTable table = publish(executor, dir, 42, new long[] {3L * WINDOW}, data);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(conf), reducer.sinkRegistrar())) {
            Outputs others = new Outputs(executor, dir, 43, 40, 1, 1_000, 7);
            GatedChannel[] gate = new GatedChannel[1];
            try (RegisteredOutputTable othersTable = others.table) {
                BlockFetcher fetcher = new BlockFetcher(gatedNode(reducer, gate), pool, 4 << 20, 16 << 10, 1_000);
                fetcher.add(new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, 0, 1));
                for (int m = 0; m < 40; m++) {
                    fetcher.add(others.request(executor.localAddress(), m, 0, 1)); // posts 1..40: their slots
                }
                assertEquals(41, gate[0].postCount());
                gate[0].release(0); // the streamed block's slot
                fetcher.progress(); // post 41: its metadata
                gate[0].release(41);
                BlockFetcher.Block s = fetcher.next(); // streamed: handed out once its offsets are known
                assertTrue(s.streamed());
                // The other requests' slots land one after the other, each well within the timeout, while the
                // stream's window (never released) does not.
                AtomicInteger released = new AtomicInteger();
                Thread lander = new Thread(() -> {
                    try {
                        for (int i = 1; i <= 40 && !Thread.currentThread().isInterrupted(); i++) {
                            Thread.sleep(200);
                            gate[0].release(i);
                            released.incrementAndGet();
                        }
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                });
                lander.start();
                BlockFetcher.StreamFailed f = assertThrows(BlockFetcher.StreamFailed.class,
                        () -> s.open(0, s.length()).read());
                int landedMeanwhile = released.get();
                lander.interrupt();
                lander.join();
                assertTrue(f.getMessage().contains("no block arrived within 1000 ms"), f.getMessage());
                assertTrue(landedMeanwhile < 40, "the stream waited until every other READ had landed ("
                        + landedMeanwhile + "): its timeout restarted on landings that were not its own");
                s.close();
                fetcher.close();
                for (int i = 42; i < gate[0].postCount(); i++) {
                    gate[0].release(i); // the windows' completions: their buffers go back
                }
                for (int i = released.get() + 1; i <= 40; i++) {
                    gate[0].release(i);
                }
                assertTrue(eventually(60, () -> pool.stats().inUseBuffers() == 0), "buffers held: " + pool.stats());
            }
        }
    }
}
