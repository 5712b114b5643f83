package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.CONF;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.eventually;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.Outputs;
import org.rdmashuffle.shuffle.core.directory.MetadataCache;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;

/**
 * What a fetcher holds is bounded by its budget ({@link FetchBudget}), and the pool's trouble — at its cap,
 * exhausted, an interrupted wait — is this executor's: completions keep flowing and no peer is blamed.
 */
class BlockFetcherBudgetTest {
    /** READs a fetcher keeps outstanding to one peer unless told otherwise (the configuration's default). */
    private static final int MAX_READS_PER_PEER = CONF.maxReadsInFlightPerPeer();

    /** A pool of 256k: a chunk of 4k buffers and one of 64k buffers, with {@code acquireTimeout}. */
    private static BufferPool smallPool(RdmaNode reducer, String acquireTimeout) {
        return new BufferPool(BufferPoolOptions.from(new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.pool.leakDetection", "paranoid",
                "spark.shuffle.rdma.pool.minBufferSize", "4k",
                "spark.shuffle.rdma.pool.maxBufferSize", "64k",
                "spark.shuffle.rdma.pool.chunkSize", "128k",
                "spark.shuffle.rdma.pool.maxRegisteredBytes", "256k",
                "spark.shuffle.rdma.pool.acquireTimeout", acquireTimeout))), reducer.sinkRegistrar());
    }

    /** Takes every 64k buffer of {@code pool} after one 4k buffer: slots and metadata fit, data blocks do not. */
    private static List<RegisteredBuffer> fillTo64kCap(BufferPool pool) {
        List<RegisteredBuffer> held = new ArrayList<>();
        held.add(pool.acquire(4 << 10));
        held.add(pool.acquire(64 << 10));
        held.add(pool.acquire(64 << 10));
        assertEquals(256 << 10, pool.stats().registeredBytes());
        return held;
    }

    /**
     * The byte budget bounds what a fetcher takes from the pool: a 32-byte slot READ takes a buffer of the
     * smallest class, and that is what it is charged. 64 slot READs with a budget of 64 KiB once took 256 KiB.
     */
    @Test
    @Timeout(60)
    void shouldChargeTheBudgetWhatItsBuffersTakeFromThePoolWhenManySmallReadsAreInFlight(@TempDir Path dir)
            throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 44, 64, 2, 2_000, 5);
            long budget = 64 << 10;
            try (RegisteredOutputTable table = out.table;
                 BlockFetcher fetcher = new BlockFetcher(reducer, pool, new MetadataCache(), budget, 1000, 64 << 10,
                         30_000)) {
                for (int m = 0; m < 64; m++) {
                    fetcher.add(out.request(executor.localAddress(), m, 0, 1));
                }
                long inUse = pool.stats().inUseBytes();
                assertTrue(inUse <= budget, "64 slot READs hold " + inUse + " bytes of the pool, the budget is "
                        + budget + " (the fetcher counts " + fetcher.bytesInFlight() + ")");
                assertEquals(inUse, fetcher.bytesInFlight(), "the budget counts what the pool gave");
                int got = 0;
                long most = 0;
                while (fetcher.outstanding() > 0) {
                    try (BlockFetcher.Block b = fetcher.next()) {
                        out.assertBytes(b);
                        got++;
                    }
                    most = Math.max(most, pool.stats().inUseBytes());
                }
                assertEquals(64, got);
                assertTrue(most <= budget, "the pool held " + most + " bytes for a budget of " + budget);
                assertEquals(0, fetcher.bytesInFlight());
            }
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    @Test
    @Timeout(180)
    void shouldDeliverEveryBlockWhenOneTaskFetchesOver10000BlocksFromOnePeer(@TempDir Path dir) throws Exception {
        int maps = 40;
        int parts = 300;
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 7, maps, parts, 600, 5);
            try (RegisteredOutputTable table = out.table;
                 BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 60_000)) {
                for (int p = 0; p < parts; p++) { // reducer-like order: every map's block of a partition
                    for (int m = 0; m < maps; m++) {
                        fetcher.add(out.request(executor.localAddress(), m, p, p + 1));
                    }
                }
                // Every posted READ holds a receive buffer: buffers in use show the work queued on the channel.
                int bound = MAX_READS_PER_PEER + 1; // the READs in flight to the one peer, and the block in hand
                assertTrue(pool.stats().inUseBuffers() <= bound, "after adding: " + pool.stats());
                int got = 0;
                long maxInUse = 0;
                while (fetcher.outstanding() > 0) {
                    try (BlockFetcher.Block b = fetcher.next()) {
                        out.assertBytes(b);
                        got++;
                        maxInUse = Math.max(maxInUse, pool.stats().inUseBuffers());
                        assertTrue(fetcher.readsInFlight() <= MAX_READS_PER_PEER, "READs in flight "
                                + fetcher.readsInFlight());
                        assertTrue(fetcher.bytesInFlight() <= 1 << 20, "bytes in flight " + fetcher.bytesInFlight());
                    }
                }
                assertTrue(maxInUse <= bound, "buffers in use while fetching: " + maxInUse);
                assertEquals(maps * parts, got);
                assertEquals(0, fetcher.bytesInFlight());
            }
            assertEquals(0, pool.stats().inUseBuffers());
            assertEquals(0, pool.stats().leaksDetected());
        }
    }

    @Test
    @Timeout(120)
    void shouldKeepCompletionsFlowingWhenThePoolIsAtItsCap(@TempDir Path dir) throws Exception {
        RdmaShuffleConf small = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.pool.leakDetection", "paranoid",
                "spark.shuffle.rdma.pool.minBufferSize", "4k",
                "spark.shuffle.rdma.pool.maxBufferSize", "64k",
                "spark.shuffle.rdma.pool.chunkSize", "128k",
                "spark.shuffle.rdma.pool.maxRegisteredBytes", "256k",
                "spark.shuffle.rdma.pool.acquireTimeout", "10m"));
        ExecutorService task = Executors.newSingleThreadExecutor();
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(small), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 9, 2, 1, 60_000, 7);
            List<RegisteredBuffer> held = new ArrayList<>();
            try (RegisteredOutputTable table = out.table;
                 BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 600_000)) {
                held.add(pool.acquire(4 << 10));  // a chunk of 4k buffers stays registered
                held.add(pool.acquire(64 << 10)); // a chunk of 64k buffers, all held: the pool is at its cap
                held.add(pool.acquire(64 << 10));
                assertEquals(256 << 10, pool.stats().registeredBytes());
                BlockFetcher.Request r = out.request(executor.localAddress(), 0, 0, 1);
                assertTrue(r.startPartition() < r.endPartition() && out.offsets[0][1] > 4096, "block too small");
                // The task thread adds and waits for the block; its data buffer (64k class) is not to be had.
                Future<Long> block = task.submit(() -> {
                    fetcher.add(r);
                    try (BlockFetcher.Block b = fetcher.next()) {
                        out.assertBytes(b);
                        return b.length();
                    }
                });
                assertTrue(eventually(60, () -> pool.stats().waits() > 0 || block.isDone()),
                        "nobody waited for the pool");
                // Whoever waits, it must not be the reducer's completion thread: another READ on the same
                // channel still completes while the pool is exhausted.
                RdmaChannel ch = reducer.connect(executor.localAddress());
                RegisteredBuffer probe = pool.acquire(ShuffleOutputTable.SLOT_BYTES);
                CompletableFuture<Integer> status = new CompletableFuture<>();
                ch.post(new ReadBatch(1).add(out.table.descriptor().address(), out.table.descriptor().rkey(),
                        ShuffleOutputTable.SLOT_BYTES, probe, 0, 1), (id, st, len) -> status.complete(st));
                assertEquals(ReadStatus.SUCCESS, status.get()); // bounded by @Timeout, not the 10 min pool wait
                probe.release();
                held.forEach(RegisteredBuffer::release);
                held.clear();
                assertEquals(out.offsets[0][1], (long) block.get());
            } finally {
                held.forEach(RegisteredBuffer::release);
                task.shutdownNow();
            }
            assertEquals(0, pool.stats().inUseBuffers());
            assertEquals(0, pool.stats().timeouts());
        }
    }

    @Test
    @Timeout(120)
    void shouldFailAsThisExecutorsTroubleNotThePeersWhenThePoolIsExhausted(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = smallPool(reducer, "0ms")) {
            Outputs out = new Outputs(executor, dir, 15, 1, 1, 60_000, 7);
            List<RegisteredBuffer> held = fillTo64kCap(pool); // other tasks hold the pool's 64k buffers
            try (RegisteredOutputTable table = out.table;
                 BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 60_000)) {
                assertTrue(out.offsets[0][1] > 4096, "block fits a 4k buffer");
                fetcher.add(out.request(executor.localAddress(), 0, 0, 1));
                Exception e = assertThrows(Exception.class, fetcher::next);
                assertFalse(e instanceof FetchFailure, "the pool's exhaustion blamed on the peer: " + e);
                assertTrue(e instanceof BufferPoolException, e.toString());
                assertTrue(e.getMessage().contains("buffer pool exhausted"), e.getMessage());
                assertEquals(1, fetcher.outstanding(), "the block is still to come");
                held.forEach(RegisteredBuffer::release); // the other tasks finish: the same fetcher goes on
                held.clear();
                try (BlockFetcher.Block b = fetcher.next()) {
                    out.assertBytes(b);
                }
            } finally {
                held.forEach(RegisteredBuffer::release);
            }
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    @Test
    @Timeout(120)
    void shouldKeepTheInterruptAndBlameNoPeerWhenInterruptedWaitingForThePool(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = smallPool(reducer, "10m")) {
            Outputs out = new Outputs(executor, dir, 16, 1, 1, 60_000, 7);
            List<RegisteredBuffer> held = fillTo64kCap(pool);
            try (RegisteredOutputTable table = out.table;
                 BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 600_000)) {
                CompletableFuture<Throwable> thrown = new CompletableFuture<>();
                CompletableFuture<Boolean> interruptKept = new CompletableFuture<>();
                Thread task = new Thread(() -> {
                    try {
                        fetcher.add(out.request(executor.localAddress(), 0, 0, 1));
                        fetcher.next().close();
                        thrown.complete(null);
                    } catch (Throwable t) {
                        thrown.complete(t);
                    } finally {
                        interruptKept.complete(Thread.currentThread().isInterrupted());
                    }
                });
                task.start();
                assertTrue(eventually(60, () -> pool.stats().waits() > 0 || thrown.isDone()), "nobody waited");
                task.interrupt(); // the task is killed while it waits for a buffer
                Throwable t = thrown.get();
                assertTrue(t != null && !(t instanceof FetchFailure), "interruption blamed on the peer: " + t);
                assertTrue(t instanceof BufferPoolException, String.valueOf(t));
                assertTrue(interruptKept.get(), "the interrupt flag was lost");
                task.join();
            } finally {
                held.forEach(RegisteredBuffer::release);
            }
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }
}
