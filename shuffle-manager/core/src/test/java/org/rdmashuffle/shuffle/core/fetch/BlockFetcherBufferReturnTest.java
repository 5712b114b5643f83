package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.CONF;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.eventually;

import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.Outputs;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;

/** Every pooled buffer goes back when a fetcher closes early ({@link FetchBuffers}): READs still on the wire,
 * blocks arrived but not taken, blocks queued behind a failure. */
class BlockFetcherBufferReturnTest {
    /** Calls {@link BlockFetcher#progress} until every READ is taken up and blocks hold {@code bytes} of the pool. */
    private static void progressUntilArrived(BlockFetcher fetcher, long bytes) throws InterruptedException {
        assertTrue(eventually(60, () -> {
            fetcher.progress(); // as the reader does between local blocks
            return fetcher.readsInFlight() == 0 && fetcher.bytesInFlight() == bytes;
        }), "blocks did not arrive: " + fetcher.readsInFlight() + " READs, " + fetcher.bytesInFlight() + " bytes");
    }

    @Test
    @Timeout(120)
    void shouldReturnEveryBufferWhenClosedWhileReadsAreOutstanding(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 8, 12, 4, 400_000, 6);
            try (RegisteredOutputTable table = out.table) {
                // Whether READs are still on the wire when the task closes its fetcher is a race with the
                // serving node: try until a close meets outstanding READs (the case under test); every attempt,
                // also one that finds none, must give every buffer back.
                boolean closedWithReadsOutstanding = false;
                for (int attempt = 0; attempt < 20 && !closedWithReadsOutstanding; attempt++) {
                    BlockFetcher fetcher = new BlockFetcher(reducer, pool, 16 << 20, 256 << 10, 60_000);
                    for (int round = 0; round < 8; round++) {
                        for (int m = 0; m < 12; m++) {
                            fetcher.add(out.request(executor.localAddress(), m, 0, 4));
                        }
                    }
                    try (BlockFetcher.Block first = fetcher.next()) {
                        out.assertBytes(first);
                    }
                    long completedAtClose = reducer.stats().readsCompleted() + reducer.stats().readsFailed();
                    long outstandingAtClose = reducer.stats().readsPosted() - completedAtClose;
                    fetcher.close(); // as a task that ends early: other READs may still be on the wire
                    assertTrue(eventually(60, () -> pool.stats().inUseBuffers() == 0),
                            "receive buffers still held after the fetcher closed: " + pool.stats());
                    long completedAfter = reducer.stats().readsCompleted() + reducer.stats().readsFailed();
                    closedWithReadsOutstanding = outstandingAtClose > 0 && completedAfter > completedAtClose;
                    assertTrue(eventually(60, () -> reducer.stats().readsPosted()
                            == reducer.stats().readsCompleted() + reducer.stats().readsFailed()),
                            "READs never completed: " + reducer.stats());
                    assertEquals(0, pool.stats().inUseBytes());
                }
                assertTrue(closedWithReadsOutstanding, "no attempt closed the fetcher with READs on the wire: "
                        + reducer.stats());
                assertEquals(0, pool.stats().leaksDetected());
            }
        }
    }

    @Test
    @Timeout(120)
    void shouldReturnBuffersOfArrivedBlocksWhenClosedBeforeTheyAreTaken(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 13, 4, 1, 50_000, 11);
            try (RegisteredOutputTable table = out.table) {
                BlockFetcher fetcher = new BlockFetcher(reducer, pool, 16 << 20, 1 << 20, 60_000);
                long total = 0;
                for (int m = 0; m < 4; m++) {
                    assertTrue(out.offsets[m][1] > 0, "map " + m + " is empty");
                    total += pool.bytesTaken((int) out.offsets[m][1]); // what each block holds of the pool
                    fetcher.add(out.request(executor.localAddress(), m, 0, 1));
                }
                progressUntilArrived(fetcher, total);
                assertEquals(4, pool.stats().inUseBuffers(), "the arrived blocks hold one buffer each");
                fetcher.close(); // the task ends while reading local blocks: none of the four was taken
                assertEquals(0, pool.stats().inUseBuffers(), "buffers of arrived blocks lost: " + pool.stats());
                assertEquals(0, pool.stats().inUseBytes());
            }
            assertEquals(0, pool.stats().leaksDetected());
        }
    }

    @Test
    @Timeout(120)
    void shouldReturnBuffersOfBlocksQueuedBehindAFailureWhenNextThrowsIt(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 14, 4, 2, 50_000, 12);
            try (RegisteredOutputTable table = out.table) {
                BlockFetcher fetcher = new BlockFetcher(reducer, pool, 16 << 20, 1 << 20, 60_000);
                fetcher.add(out.request(executor.localAddress(), 0, 0, 2));
                try (BlockFetcher.Block b = fetcher.next()) {
                    out.assertBytes(b); // map 0's metadata is cached from now on
                }
                // Cached metadata: the range outside the output fails at once, ahead of the blocks added after it.
                BlockFetcher.Request bad = out.request(executor.localAddress(), 0, 1, 3);
                fetcher.add(bad);
                long total = 0;
                for (int m = 1; m < 4; m++) {
                    assertTrue(out.offsets[m][2] > 0, "map " + m + " is empty");
                    total += pool.bytesTaken((int) out.offsets[m][2]);
                    fetcher.add(out.request(executor.localAddress(), m, 0, 2));
                }
                progressUntilArrived(fetcher, total);
                FetchFailure f = assertThrows(FetchFailure.class, fetcher::next);
                assertEquals(bad, f.request());
                assertEquals(3, pool.stats().inUseBuffers(), "the blocks behind the failure hold one buffer each");
                fetcher.close(); // the task fails with f
                assertEquals(0, pool.stats().inUseBuffers(), "buffers of queued blocks lost: " + pool.stats());
                assertEquals(0, pool.stats().inUseBytes());
            }
            assertEquals(0, pool.stats().leaksDetected());
        }
    }
}
