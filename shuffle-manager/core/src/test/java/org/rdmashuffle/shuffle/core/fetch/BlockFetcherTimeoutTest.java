package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.CONF;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.eventually;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.gatedNode;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.Set;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
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

/** When nothing lands in time, the failure names a request still outstanding: the oldest post in flight. */
class BlockFetcherTimeoutTest {
    @Test
    @Timeout(120)
    void shouldBlameTheOldestPostStillInFlightWhenAnotherStepWasPostedAgainSince(@TempDir Path dir)
            throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 18, 3, 1, 10_000, 13);
            GatedChannel[] gate = new GatedChannel[1];
            try (RegisteredOutputTable table = out.table;
                 BlockFetcher fetcher = new BlockFetcher(gatedNode(reducer, gate), pool, 1 << 20, 64 << 10, 60_000)) {
                BlockFetcher.Request w = out.request(executor.localAddress(), 0, 0, 1);
                BlockFetcher.Request x = out.request(executor.localAddress(), 1, 0, 1);
                BlockFetcher.Request y = out.request(executor.localAddress(), 2, 0, 1);
                fetcher.add(w); // post 0: w's slot
                fetcher.add(x); // post 1: x's slot
                fetcher.add(y); // post 2: y's slot
                assertEquals(3, gate[0].postCount());
                assertEquals(w, fetcher.oldestOutstanding());
                gate[0].release(1);
                fetcher.progress(); // post 3: x's metadata, after y's slot
                assertEquals(4, gate[0].postCount());
                gate[0].release(0);
                fetcher.progress(); // post 4: w's metadata
                assertEquals(5, gate[0].postCount());
                // In flight, oldest first: y's slot (post 2), x's metadata (3), w's metadata (4).
                assertEquals(y, fetcher.oldestOutstanding(), "blamed a request posted again since");
                gate[0].release(2);
                fetcher.progress(); // post 5: y's metadata
                assertEquals(x, fetcher.oldestOutstanding());
                for (int i = 3; i < gate[0].postCount(); i++) {
                    gate[0].release(i);
                    fetcher.progress();
                }
                assertTrue(gate[0].postCount() == 9, "posts: " + gate[0].postCount()); // and three data READs
                for (int i = 0; i < 3; i++) {
                    try (BlockFetcher.Block b = fetcher.next()) {
                        out.assertBytes(b);
                    }
                }
                assertEquals(null, fetcher.oldestOutstanding());
            }
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    @Test
    @Timeout(120)
    void shouldNameAStillOutstandingRequestWhenNoBlockArrivesInTime(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Path bigFile = dir.resolve("big.data");
            byte[] big = new byte[64 << 20];
            new SplittableRandom(3).nextBytes(big);
            Files.write(bigFile, big);
            Outputs small = new Outputs(executor, dir, 11, 1, 1, 10_000, 9);
            try (RegisteredOutputTable smallTable = small.table;
                 RegisteredOutputTable bigTable = new RegisteredOutputTable(executor, 12, 1)) {
                bigTable.publish(0, 0, RegisteredMapOutput.register(executor, bigFile,
                        new MapOutputLayout(new long[] {0, big.length}, 1 << 30)));
                BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 1 << 20, 1); // 1 ms to wait
                BlockFetcher.Request quick = small.request(executor.localAddress(), 0, 0, 1);
                BlockFetcher.Request slow = new BlockFetcher.Request(executor.localAddress(), bigTable.descriptor(),
                        0, 0, 0, 1);
                fetcher.add(quick);
                fetcher.add(slow);
                Set<BlockFetcher.Request> delivered = new HashSet<>();
                FetchFailure f = null;
                while (f == null && fetcher.outstanding() > 0) {
                    try (BlockFetcher.Block b = fetcher.next()) {
                        if (b.streamed()) { // larger than the pool's largest buffer: READ as it is read
                            b.open(0, b.length()).readAllBytes();
                        }
                        delivered.add(b.request());
                    } catch (FetchFailure e) {
                        f = e;
                    } catch (BlockFetcher.StreamFailed e) {
                        f = e.failure();
                    }
                }
                assertTrue(f != null, "64 MiB arrived within 1 ms");
                assertTrue(f.getMessage().contains("no block arrived"), f.getMessage());
                assertTrue(f.request() != null, "a timeout blames no request");
                assertFalse(delivered.contains(f.request()), "a timeout blames a delivered block: " + f.request());
                assertTrue(f.request().equals(quick) || f.request().equals(slow), f.request().toString());
                fetcher.close();
                assertTrue(eventually(60, () -> pool.stats().inUseBuffers() == 0),
                        "receive buffers still held after the fetcher closed: " + pool.stats());
            }
        }
    }
}
