package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.CONF;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.MAPS;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.PARTS;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.Outputs;
import org.rdmashuffle.shuffle.core.directory.MetadataCache;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.RegionDescriptor;

/** Blocks arrive byte for byte: every range, over a reconnected channel, with only the offsets needed; a dead
 * peer costs one connect. */
class BlockFetcherDeliveryTest {
    private final byte[][] data = new byte[MAPS][];
    private final long[][] offsets = new long[MAPS][];

    private RegisteredOutputTable publish(RdmaNode executor, Path dir) throws Exception {
        return FetcherFixtures.publish(executor, dir, data, offsets);
    }

    @Test
    @Timeout(60)
    void shouldConnectAgainWhenItsChannelClosedItselfAfterGoingUnusedWhileTheTaskHeldIt(@TempDir Path dir)
            throws Exception {
        RdmaShuffleConf idle = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.idleTimeout", "1s"));
        try (RdmaNode executor = RdmaTransport.open(idle, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(idle, NodeOptions.loopback());
             RegisteredOutputTable table = publish(executor, dir);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(idle), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 300_000, 64 << 10, 20_000)) {
            fetcher.add(new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, 0, PARTS));
            try (BlockFetcher.Block b = fetcher.next()) {
                assertEquals(data[0].length, b.length());
            }
            RdmaChannel first = reducer.connect(executor.localAddress());
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (first.isOpen()) { // unused for the idle timeout, the channel closes itself
                assertTrue(System.nanoTime() < deadline, "the unused channel never closed");
                Thread.sleep(50);
            }
            fetcher.add(new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 1, 1, 0, PARTS));
            try (BlockFetcher.Block b = fetcher.next()) {
                assertEquals(-1, b.bytes().mismatch(ByteBuffer.wrap(data[1])), "bytes after reconnecting");
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldDeliverEveryRangeByteForByteWithinTheInFlightBound(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             RegisteredOutputTable table = publish(executor, dir);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 300_000, 64 << 10, 20_000)) {
            Map<String, BlockFetcher.Request> wanted = new HashMap<>();
            for (int m = 0; m < MAPS; m++) {
                for (int[] range : new int[][] {{0, 1}, {1, 3}, {2, 3}, {0, PARTS}, {3, 5}}) {
                    BlockFetcher.Request r = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), m, m,
                            range[0], range[1]);
                    wanted.put(m + ":" + range[0] + "-" + range[1], r);
                    fetcher.add(r);
                }
            }
            long largest = 0;
            for (int m = 0; m < MAPS; m++) {
                largest = Math.max(largest, offsets[m][PARTS]);
            }
            int got = 0;
            long maxSeen = 0;
            while (fetcher.outstanding() > 0) {
                maxSeen = Math.max(maxSeen, fetcher.bytesInFlight());
                try (BlockFetcher.Block b = fetcher.next()) {
                    BlockFetcher.Request r = b.request();
                    int from = (int) offsets[r.mapIndex()][r.startPartition()];
                    int to = (int) offsets[r.mapIndex()][r.endPartition()];
                    assertEquals(to - from, b.length());
                    assertEquals(-1, b.bytes().mismatch(ByteBuffer.wrap(data[r.mapIndex()], from, to - from)),
                            "bytes of " + r);
                    for (int p = r.startPartition(); p <= r.endPartition(); p++) {
                        assertEquals(offsets[r.mapIndex()][p] - from, b.offsetOf(p), "partition " + p + " of " + r);
                    }
                    assertThrows(IndexOutOfBoundsException.class, () -> b.offsetOf(r.endPartition() + 1));
                    got++;
                }
            }
            assertEquals(wanted.size(), got);
            assertTrue(maxSeen <= Math.max(300_000, largest), "in flight " + maxSeen);
            assertEquals(0, fetcher.bytesInFlight());
            assertEquals(0, pool.stats().inUseBuffers());
            assertEquals(0, pool.stats().leaksDetected());
        }
    }

    @Test
    @Timeout(120)
    void shouldConnectOnceAndFailEveryRequestWhenNothingListensAtThePeer() throws Exception {
        RdmaShuffleConf noRetries = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.pool.leakDetection", "paranoid",
                "spark.shuffle.rdma.connectRetries", "0"));
        NodeAddress gone;
        RegionDescriptor table;
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RegisteredOutputTable t = new RegisteredOutputTable(executor, 17, 8)) {
            gone = executor.localAddress();
            table = t.descriptor();
        } // the executor is gone: nothing listens at its address any more
        try (RdmaNode reducer = RdmaTransport.open(noRetries, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(noRetries), reducer.sinkRegistrar())) {
            java.util.concurrent.atomic.AtomicInteger connects = new java.util.concurrent.atomic.AtomicInteger();
            RdmaNode counting = (RdmaNode) Proxy.newProxyInstance(RdmaNode.class.getClassLoader(),
                    new Class<?>[] {RdmaNode.class}, (proxy, method, args) -> {
                        if (method.getName().equals("connect")) {
                            connects.incrementAndGet();
                        }
                        try {
                            return method.invoke(reducer, args);
                        } catch (InvocationTargetException e) {
                            throw e.getCause();
                        }
                    });
            try (BlockFetcher fetcher = new BlockFetcher(counting, pool, 1 << 20, 64 << 10, 60_000)) {
                List<BlockFetcher.Request> requests = new ArrayList<>();
                for (int m = 0; m < 8; m++) {
                    BlockFetcher.Request r = new BlockFetcher.Request(gone, table, m, m, 0, 1);
                    requests.add(r);
                    fetcher.add(r);
                }
                assertEquals(1, connects.get(), "connects to a dead peer");
                Set<BlockFetcher.Request> failed = new HashSet<>();
                Set<Throwable> causes = new HashSet<>();
                while (fetcher.outstanding() > 0) {
                    FetchFailure f = assertThrows(FetchFailure.class, fetcher::next);
                    assertTrue(f.getMessage().contains("cannot connect"), f.getMessage());
                    assertTrue(f.getMessage().contains("map index " + f.request().mapIndex()), f.getMessage());
                    failed.add(f.request());
                    causes.add(f.getCause());
                }
                assertEquals(new HashSet<>(requests), failed, "every request fails on its own");
                assertEquals(1, causes.size(), "one connect, one cause: " + causes);
            }
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    @Test
    @Timeout(120)
    void shouldReadOnlyTheOffsetsARequestNeedsAndCacheNoOffsets(@TempDir Path dir) throws Exception {
        int parts = 100_000;
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs wide = new Outputs(executor, dir, 41, 2, parts, 4, 3);
            Outputs narrow = new Outputs(executor, dir, 42, 2, 4, 4, 3);
            MetadataCache wideCache = new MetadataCache();
            MetadataCache narrowCache = new MetadataCache();
            try (RegisteredOutputTable w = wide.table;
                 RegisteredOutputTable n = narrow.table;
                 BlockFetcher fw = new BlockFetcher(reducer, pool, wideCache, 1 << 20, 8, 64 << 10, 20_000);
                 BlockFetcher fn = new BlockFetcher(reducer, pool, narrowCache, 1 << 20, 8, 64 << 10, 20_000)) {
                int head = 24 + RegionDescriptor.ENCODED_BYTES; // one region each
                fw.add(wide.request(executor.localAddress(), 0, 50_000, 50_003));
                try (BlockFetcher.Block b = fw.next()) {
                    wide.assertBytes(b);
                    for (int p = 50_000; p <= 50_003; p++) {
                        assertEquals(wide.offsets[0][p] - wide.offsets[0][50_000], b.offsetOf(p));
                    }
                }
                // the slot, the header and descriptors, and offsets 50000..50003: not the 800 KB of all offsets
                assertEquals(ShuffleOutputTable.SLOT_BYTES + head + 4 * 8, fw.controlBytesRead());
                fw.add(wide.request(executor.localAddress(), 0, parts - 1, parts)); // cached: its two offsets
                try (BlockFetcher.Block b = fw.next()) {
                    wide.assertBytes(b);
                }
                assertEquals(ShuffleOutputTable.SLOT_BYTES + head + 6 * 8, fw.controlBytesRead());
                fw.add(wide.request(executor.localAddress(), 1, 0, 1)); // offsets 0..1 follow the descriptors
                try (BlockFetcher.Block b = fw.next()) {
                    wide.assertBytes(b);
                }
                fn.add(narrow.request(executor.localAddress(), 0, 1, 3));
                fn.add(narrow.request(executor.localAddress(), 1, 0, 4));
                for (int i = 0; i < 2; i++) {
                    try (BlockFetcher.Block b = fn.next()) {
                        narrow.assertBytes(b);
                    }
                }
                assertEquals(2, wideCache.size());
                assertEquals(2, narrowCache.size());
                // 100,000 partitions per map cost the cache what 4 do: it holds no offsets
                assertEquals(narrowCache.heldBytes(), wideCache.heldBytes());
                assertTrue(wideCache.heldBytes() < 1024, "cache holds " + wideCache.heldBytes() + " bytes");
            }
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }
}
