package org.rdmashuffle.shuffle.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

class BlockFetcherTest {
    private static final RdmaShuffleConf CONF = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
            "spark.shuffle.rdma.pool.leakDetection", "paranoid"));
    /** READs a fetcher keeps outstanding to one peer unless told otherwise (the configuration's default). */
    private static final int MAX_READS_PER_PEER = CONF.maxReadsInFlightPerPeer();
    private static final int MAPS = 6;
    private static final int PARTS = 5;

    private byte[][] data = new byte[MAPS][];
    private long[][] offsets = new long[MAPS][];

    private ShuffleOutputTable publish(RdmaNode executor, Path dir) throws Exception {
        SplittableRandom rnd = new SplittableRandom(21);
        ShuffleOutputTable table = new ShuffleOutputTable(executor, 3, MAPS + 1); // index MAPS stays empty
        for (int m = 0; m < MAPS; m++) {
            offsets[m] = new long[PARTS + 1];
            for (int p = 1; p <= PARTS; p++) {
                offsets[m][p] = offsets[m][p - 1] + (p == 2 ? 0 : rnd.nextInt(200_000));
            }
            data[m] = new byte[(int) offsets[m][PARTS]];
            rnd.nextBytes(data[m]);
            Path f = dir.resolve("shuffle_3_" + m + "_0.data");
            Files.write(f, data[m]);
            table.publish(m, m, RegisteredMapOutput.register(executor, f, new MapOutputLayout(offsets[m], 100_000)));
        }
        return table;
    }

    @Test
    @Timeout(60)
    void shouldConnectAgainWhenItsChannelClosedItselfAfterGoingUnusedWhileTheTaskHeldIt(@TempDir Path dir)
            throws Exception {
        RdmaShuffleConf idle = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.idleTimeout", "1s"));
        try (RdmaNode executor = RdmaTransport.open(idle, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(idle, NodeOptions.loopback());
             ShuffleOutputTable table = publish(executor, dir);
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
             ShuffleOutputTable table = publish(executor, dir);
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
    @Timeout(60)
    void shouldHandAMapTheTableDoesNotHoldToSparksPathAndFailNamingTheMapWhenThePeerIsGone(@TempDir Path dir)
            throws Exception {
        try (RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 20_000)) {
            RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
            ShuffleOutputTable table = publish(executor, dir);
            BlockFetcher.Request missing = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), MAPS, -1,
                    0, 1);
            fetcher.add(missing); // an empty slot: migrated there by decommissioning, or lost
            try (BlockFetcher.Block b = fetcher.next()) {
                assertEquals(missing, b.request());
                assertTrue(b.unregistered(), "a map its table does not hold goes through Spark's path");
                assertEquals(BlockFetcher.NOT_IN_TABLE, b.viaSparkReason());
            }
            assertEquals(0, pool.stats().inUseBuffers());

            BlockFetcher.Request good = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 1, 1, 0, 1);
            fetcher.add(good);
            fetcher.next().close();
            table.close();
            executor.close();
            BlockFetcher.Request lost = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 1, 1, 1, 3);
            fetcher.add(lost); // metadata is cached, so this goes straight to the (gone) peer's data
            FetchFailure g = assertThrows(FetchFailure.class, fetcher::next);
            assertEquals(lost, g.request());
            assertEquals(0, fetcher.bytesInFlight());
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    @Test
    @Timeout(60)
    void shouldFailWithoutFetchingWhenTheBlockSizeDoesNotMatchTheTracker(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             ShuffleOutputTable table = publish(executor, dir);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 20_000)) {
            int size = (int) offsets[1][1];
            assertTrue(size > 0, "block is empty");
            BlockFetcher.Request matching = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 1, 1,
                    0, 1, new BlockFetcher.Expected(PARTS, 1, size));
            fetcher.add(matching);
            try (BlockFetcher.Block b = fetcher.next()) {
                assertEquals(-1, b.bytes().mismatch(ByteBuffer.wrap(data[1], 0, size)));
            }
            long acquires = pool.stats().acquires();
            BlockFetcher.Request smaller = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 1, 1,
                    0, 1, new BlockFetcher.Expected(PARTS, 1, size - 1));
            fetcher.add(smaller);
            FetchFailure f = assertThrows(FetchFailure.class, fetcher::next);
            assertEquals(smaller, f.request());
            assertTrue(f.getMessage().contains("map output at peer does not match MapOutputTracker"), f.getMessage());
            assertTrue(f.getMessage().contains(size + " bytes"), f.getMessage());
            BlockFetcher.Request emptyThere = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 1,
                    1, 1, 2, new BlockFetcher.Expected(PARTS, 1, 1000)); // partition 1 is empty at the peer
            assertEquals(0, offsets[1][2] - offsets[1][1]);
            fetcher.add(emptyThere);
            f = assertThrows(FetchFailure.class, fetcher::next);
            assertTrue(f.getMessage().contains("does not match MapOutputTracker"), f.getMessage());
            // metadata cached: each request READs its offsets window, never the data of a block that does not match
            assertEquals(acquires + 2, pool.stats().acquires(), "a buffer was taken for a block that does not match");
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    @Test
    @Timeout(60)
    void shouldFailBeforeTakingABufferWhenASlotClaimsMoreMetadataThanTheShuffleHas(@TempDir Path dir)
            throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             ShuffleOutputTable table = publish(executor, dir);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 20_000)) {
            // A lying peer's table: map index 0 published, its metadata said to be 64 MiB.
            ByteBuffer slots = ByteBuffer.allocateDirect(ShuffleOutputTable.SLOT_BYTES);
            RegionDescriptor real = table.descriptor();
            slots.putInt(1).putInt(1).putLong(0).putLong(real.address()).putInt(real.rkey()).putInt(64 << 20).clear();
            try (MemoryRegion forged = executor.register(slots, RegionAccess.REMOTE_READ)) {
                BlockFetcher.Request r = new BlockFetcher.Request(executor.localAddress(), forged.descriptor(), 0, 0,
                        0, 1, new BlockFetcher.Expected(PARTS, 1, 1 << 20));
                fetcher.add(r);
                FetchFailure f = assertThrows(FetchFailure.class, fetcher::next);
                assertEquals(r, f.request());
                assertTrue(f.getMessage().contains("corrupt output table"), f.getMessage());
                assertTrue(f.getMessage().contains("metadata of " + (64 << 20) + " bytes"), f.getMessage());
                // the slot is READ again in case a rewrite tore it, a few times, never the claimed metadata
                assertEquals(1 + PeerClaims.MAX_TORN_SLOT_READS, pool.stats().acquires(),
                        "only the slot's buffers may be taken: " + pool.stats());
                assertEquals(0, pool.stats().inUseBuffers());
            }
            // The same map index in the real table, but a shuffle of another partition count: its metadata
            // cannot be this map output's.
            BlockFetcher.Request other = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0,
                    0, 1, new BlockFetcher.Expected(PARTS + 3, 1, 1 << 20));
            fetcher.add(other);
            FetchFailure g = assertThrows(FetchFailure.class, fetcher::next);
            assertTrue(g.getMessage().contains("corrupt output table"), g.getMessage());
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    @Test
    @Timeout(60)
    void shouldBlameThePeerNotThisExecutorWhenASlotClaimsMoreRegionsThanThePoolCouldEverHold(@TempDir Path dir)
            throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             ShuffleOutputTable table = publish(executor, dir);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 20_000)) {
            // A lying peer's slot: 70 million regions, and a metadata length that fits them and the shuffle's
            // partitions exactly, so the length check passes: its header and descriptors alone would be 1.1 GB,
            // above the pool's cap (1 GiB).
            int regions = 70_000_000;
            long claimed = ShuffleOutputTable.metadataBytes(regions, PARTS);
            assertTrue(claimed > CONF.poolMaxRegisteredBytes() && claimed < Integer.MAX_VALUE, "claimed " + claimed);
            ByteBuffer slots = ByteBuffer.allocateDirect(ShuffleOutputTable.SLOT_BYTES);
            RegionDescriptor real = table.descriptor();
            slots.putInt(1).putInt(regions).putLong(0).putLong(real.address()).putInt(real.rkey())
                    .putInt((int) claimed).clear();
            try (MemoryRegion forged = executor.register(slots, RegionAccess.REMOTE_READ)) {
                BlockFetcher.Request r = new BlockFetcher.Request(executor.localAddress(), forged.descriptor(), 0, 0,
                        2, 3, new BlockFetcher.Expected(PARTS, 1, 1 << 20));
                fetcher.add(r);
                // before: a BufferPoolException ("exceeds the cap"), which blames no peer and fails the task
                FetchFailure f = assertThrows(FetchFailure.class, fetcher::next);
                assertEquals(r, f.request());
                assertTrue(f.getMessage().contains("corrupt output table"), f.getMessage());
                assertEquals(1 + PeerClaims.MAX_TORN_SLOT_READS, pool.stats().acquires(),
                        "only the slot's buffers may be taken: " + pool.stats());
                assertEquals(0, pool.stats().inUseBuffers());
            }
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
             ShuffleOutputTable t = new ShuffleOutputTable(executor, 17, 8)) {
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

    // ---- bounded work, early ends and completions that must not block ----

    /** Map outputs of random bytes, published in one output table. */
    private static final class Outputs {
        final byte[][] data;
        final long[][] offsets;
        final ShuffleOutputTable table;

        Outputs(RdmaNode executor, Path dir, int shuffleId, int maps, int parts, int maxPartBytes, long seed)
                throws Exception {
            SplittableRandom rnd = new SplittableRandom(seed);
            data = new byte[maps][];
            offsets = new long[maps][];
            table = new ShuffleOutputTable(executor, shuffleId, maps);
            for (int m = 0; m < maps; m++) {
                offsets[m] = new long[parts + 1];
                for (int p = 1; p <= parts; p++) {
                    offsets[m][p] = offsets[m][p - 1] + rnd.nextInt(maxPartBytes + 1);
                }
                data[m] = new byte[(int) offsets[m][parts]];
                rnd.nextBytes(data[m]);
                Path f = dir.resolve("shuffle_" + shuffleId + "_" + m + "_0.data");
                Files.write(f, data[m]);
                table.publish(m, m, RegisteredMapOutput.register(executor, f, new MapOutputLayout(offsets[m], 1 << 30)));
            }
        }

        BlockFetcher.Request request(NodeAddress peer, int map, int start, int end) {
            return new BlockFetcher.Request(peer, table.descriptor(), map, map, start, end);
        }

        void assertBytes(BlockFetcher.Block b) {
            BlockFetcher.Request r = b.request();
            int from = (int) offsets[r.mapIndex()][r.startPartition()];
            int to = (int) offsets[r.mapIndex()][r.endPartition()];
            assertEquals(to - from, b.length(), "length of " + r);
            assertEquals(-1, b.bytes().mismatch(ByteBuffer.wrap(data[r.mapIndex()], from, to - from)), "bytes of " + r);
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
            try (ShuffleOutputTable w = wide.table;
                 ShuffleOutputTable n = narrow.table;
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

    /** A forged map output: its data, and a metadata region listing {@code offsets}, both registered. */
    private static final class Forged implements AutoCloseable {
        final MemoryRegion data;
        final ByteBuffer metaMem;
        final MemoryRegion meta;
        final MemoryRegion slot;

        Forged(RdmaNode executor, int dataBytes, long regionBytes, long... offsets) throws Exception {
            data = executor.register(ByteBuffer.allocateDirect(dataBytes), RegionAccess.REMOTE_READ);
            int parts = offsets.length - 1;
            metaMem = ByteBuffer.allocateDirect((int) ShuffleOutputTable.metadataBytes(1, parts));
            metaMem.putInt(1).putInt(parts).putLong(regionBytes).putLong(0);
            RegionDescriptor d = data.descriptor();
            new RegionDescriptor(d.address(), regionBytes, d.rkey()).writeTo(metaMem);
            for (long o : offsets) {
                metaMem.putLong(o);
            }
            metaMem.clear();
            meta = executor.register(metaMem, RegionAccess.REMOTE_READ);
            ByteBuffer slotMem = ByteBuffer.allocateDirect(ShuffleOutputTable.SLOT_BYTES);
            RegionDescriptor m = meta.descriptor();
            slotMem.putInt(1).putInt(1).putLong(0).putLong(m.address()).putInt(m.rkey()).putInt((int) m.length())
                    .clear();
            slot = executor.register(slotMem, RegionAccess.REMOTE_READ);
        }

        BlockFetcher.Request request(NodeAddress peer, int start, int end) {
            return new BlockFetcher.Request(peer, slot.descriptor(), 0, 0, start, end,
                    new BlockFetcher.Expected((int) (metaMem.capacity() - 44) / 8 - 1, 0, 1 << 20));
        }

        @Override
        public void close() {
            slot.close();
            meta.close();
            data.close();
        }
    }

    private static FetchFailure failureOf(BlockFetcher fetcher, BlockFetcher.Request r) {
        fetcher.add(r);
        FetchFailure f = assertThrows(FetchFailure.class, fetcher::next);
        assertEquals(r, f.request());
        return f;
    }

    @Test
    @Timeout(60)
    void shouldFailTheFetchWhenAPeerListsOffsetsThatCannotBe() throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 20_000)) {
            NodeAddress peer = executor.localAddress();
            try (Forged decreasing = new Forged(executor, 1000, 1000, 0, 600, 400, 1000)) {
                // uncached: the metadata READ brings offsets 1..2, which decrease
                FetchFailure f = failureOf(fetcher, decreasing.request(peer, 1, 2));
                assertTrue(f.getMessage().contains("partition 2 at offset 400 (after 600"), f.getMessage());
                fetcher.add(decreasing.request(peer, 0, 1));
                try (BlockFetcher.Block b = fetcher.next()) {
                    assertEquals(600, b.length()); // offsets 0..1 are fine: the metadata is cached now
                }
                // cached: the offsets READ alone brings them; what does not make sense is READ again, slot and
                // metadata, a bounded number of times, before the request fails
                long again = fetcher.metadataReadsAgain();
                f = failureOf(fetcher, decreasing.request(peer, 1, 3));
                assertTrue(f.getMessage().contains("corrupt map output metadata")
                        && f.getMessage().contains((PeerClaims.MAX_TORN_SLOT_READS + 1) + " times in a row"),
                        f.getMessage());
                assertEquals(again + PeerClaims.MAX_TORN_SLOT_READS + 1, fetcher.metadataReadsAgain());
            }
            try (Forged beyond = new Forged(executor, 1000, 1000, 0, 1200, 1000)) {
                FetchFailure f = failureOf(fetcher, beyond.request(peer, 0, 1));
                assertTrue(f.getMessage().contains("in 1000 bytes"), f.getMessage());
            }
            try (Forged shortEnd = new Forged(executor, 1000, 1000, 0, 10, 900)) { // the last offset is not the length
                FetchFailure f = failureOf(fetcher, shortEnd.request(peer, 1, 2));
                assertTrue(f.getMessage().contains("corrupt map output metadata"), f.getMessage());
            }
            try (Forged longRegion = new Forged(executor, 1000, 4000, 0, 10, 4000)) { // a region longer than its data
                FetchFailure f = failureOf(fetcher, longRegion.request(peer, 1, 2));
                assertTrue(f.getMessage().contains("data READ failed"), f.getMessage());
            }
            try (Forged narrow = new Forged(executor, 1000, 1000, 0, 10, 1000)) {
                // a request for partitions the map output does not have: its offsets lie outside the region
                BlockFetcher.Request outside = new BlockFetcher.Request(peer, narrow.slot.descriptor(), 0, 0, 1, 5);
                FetchFailure f = failureOf(fetcher, outside);
                assertTrue(f.getMessage().contains("partition range outside the map output"), f.getMessage());
            }
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    /**
     * A metadata window whose bytes landed wrong once (seen over SoftiWARP: offsets of zeros, or of another
     * map output) is READ again — slot, then metadata — and the block arrives; the same for an offsets
     * window READ with cached metadata, which is dropped from the cache first.
     */
    @Test
    @Timeout(60)
    void shouldReadAMetadataWindowAgainAndDeliverTheBlockWhenItsBytesLandedWrongOnce() throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             Forged forged = new Forged(executor, 1000, 1000, 0, 600, 700, 1000)) {
            NodeAddress peer = executor.localAddress();
            int offsetsAt = (int) ShuffleOutputTable.offsetPosition(1, 0);
            GatedChannel[] gate = new GatedChannel[1];
            MetadataCache cache = new MetadataCache();
            try (BlockFetcher fetcher = new BlockFetcher(gatedNode(reducer, gate), pool, cache, 1 << 20, 64,
                    64 << 10, 30_000)) {
                forged.metaMem.putLong(offsetsAt + 8, 0).putLong(offsetsAt + 16, 16_819_712); // as seen over siw
                fetcher.add(forged.request(peer, 1, 2)); // post 0: the slot
                gate[0].release(0);
                fetcher.progress(); // post 1: the metadata, its window wrong
                gate[0].awaitLanded(1);
                forged.metaMem.putLong(offsetsAt + 8, 600).putLong(offsetsAt + 16, 700); // right from now on
                for (int i = 1; i < 4; i++) { // the window again (slot, metadata), then the data
                    gate[0].release(i);
                    fetcher.progress();
                }
                assertEquals(5, gate[0].postCount(), "the wrong window was not READ again");
                gate[0].release(4);
                try (BlockFetcher.Block b = fetcher.next()) {
                    assertEquals(100, b.length());
                }
                assertEquals(1, fetcher.metadataReadsAgain());
                assertEquals(1, cache.size());

                // Cached metadata: the offsets window alone, wrong once.
                forged.metaMem.putLong(offsetsAt + 16, 1200);
                fetcher.add(forged.request(peer, 2, 3)); // post 5: offsets 2..3
                gate[0].release(5);
                forged.metaMem.putLong(offsetsAt + 16, 700);
                fetcher.progress(); // post 6: the slot again, the cached metadata dropped
                assertEquals(0, cache.size(), "the metadata the wrong window was READ with stayed cached");
                for (int i = 6; i < 8; i++) {
                    gate[0].release(i);
                    fetcher.progress();
                }
                gate[0].release(8);
                try (BlockFetcher.Block b = fetcher.next()) {
                    assertEquals(300, b.length());
                }
                assertEquals(2, fetcher.metadataReadsAgain());
            }
            assertEquals(0, pool.stats().inUseBuffers());
        }
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
            try (ShuffleOutputTable table = out.table;
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

    /**
     * A slot READ torn by a rewrite of the slot — "published", attempt 0, but the metadata descriptor of
     * another output (attempt 1) — must not deliver that output's bytes as attempt 0's. The fetcher
     * READs the slot again; once the slot is whole it delivers the right bytes, and a slot that stays
     * torn fails the request instead of delivering anything.
     */
    @Test
    @Timeout(60)
    void shouldReadTheSlotAgainAndNeverDeliverAnotherOutputsBytesWhenASlotReadIsTorn(@TempDir Path dir)
            throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 31, 2, 3, 50_000, 17);
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(2 * ShuffleOutputTable.SLOT_BYTES);
            ByteBuffer fakeMem = ByteBuffer.allocateDirect(ShuffleOutputTable.SLOT_BYTES);
            try (ShuffleOutputTable table = out.table;
                 MemoryRegion sink = reducer.register(sinkMem, RegionAccess.READ_SINK);
                 MemoryRegion fake = executor.register(fakeMem, RegionAccess.REMOTE_READ)) {
                RdmaChannel ch = reducer.connect(executor.localAddress());
                CompletableFuture<Integer> got = new CompletableFuture<>();
                RegionDescriptor t = table.descriptor();
                ch.post(new ReadBatch(1).add(t.address(), t.rkey(), 2 * ShuffleOutputTable.SLOT_BYTES, sink, 0, 0),
                        (id, st, n) -> got.complete(st));
                assertEquals(ReadStatus.SUCCESS, got.get(10, TimeUnit.SECONDS));
                ByteBuffer slot0 = ByteBuffer.allocate(ShuffleOutputTable.SLOT_BYTES);
                ByteBuffer slot1 = ByteBuffer.allocate(ShuffleOutputTable.SLOT_BYTES);
                slot0.put(sinkMem.duplicate().limit(ShuffleOutputTable.SLOT_BYTES)).clear();
                slot1.put(sinkMem.duplicate().position(ShuffleOutputTable.SLOT_BYTES)).clear();
                // Torn: slot 0's state, count and attempt (0), slot 1's metadata descriptor (attempt 1).
                ByteBuffer torn = ByteBuffer.allocate(ShuffleOutputTable.SLOT_BYTES);
                torn.put(slot0.duplicate().limit(16)).put(slot1.duplicate().position(16)).clear();
                fakeMem.duplicate().put(torn.duplicate());
                BlockFetcher.Request r = new BlockFetcher.Request(executor.localAddress(), fake.descriptor(), 0, 0, 0,
                        3);
                try (BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 30_000)) {
                    fetcher.add(r);
                    FetchFailure f = assertThrows(FetchFailure.class, fetcher::next);
                    assertTrue(f.getMessage().contains("names map attempt 0 but its metadata attempt 1")
                            && f.getMessage().contains("times in a row"), f.getMessage());
                }
                // Torn for the first READ only: once the slot is whole, attempt 0's own bytes arrive.
                GatedChannel[] gate = new GatedChannel[1];
                try (BlockFetcher fetcher = new BlockFetcher(gatedNode(reducer, gate), pool, 1 << 20, 64 << 10,
                        30_000)) {
                    fetcher.add(r); // post 0: the slot, torn
                    gate[0].release(0);
                    fetcher.progress(); // post 1: the metadata, attempt 1's
                    fakeMem.duplicate().put(slot0.duplicate()); // the rewrite is done
                    gate[0].release(1);
                    fetcher.progress(); // post 2: the slot again, whole now
                    assertEquals(3, gate[0].postCount(), "the torn slot was not READ again");
                    for (int i = 2; i < 5; i++) {
                        assertTrue(i < gate[0].postCount() || i == 4, "posts: " + gate[0].postCount());
                        if (i < gate[0].postCount()) {
                            gate[0].release(i);
                            fetcher.progress();
                        }
                    }
                    try (BlockFetcher.Block b = fetcher.next()) {
                        out.assertBytes(b);
                    }
                }
            }
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    /** Polls {@code condition} every 10 ms until it holds or {@code seconds} have passed. */
    private static boolean eventually(int seconds, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                return false;
            }
            Thread.sleep(10);
        }
        return true;
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
            try (ShuffleOutputTable table = out.table;
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
    void shouldReturnEveryBufferWhenClosedWhileReadsAreOutstanding(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 8, 12, 4, 400_000, 6);
            try (ShuffleOutputTable table = out.table) {
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

    /** Calls {@link BlockFetcher#progress} until every READ is taken up and blocks hold {@code bytes} of the pool. */
    private static void progressUntilArrived(BlockFetcher fetcher, long bytes) throws InterruptedException {
        assertTrue(eventually(60, () -> {
            fetcher.progress(); // as the reader does between local blocks
            return fetcher.readsInFlight() == 0 && fetcher.bytesInFlight() == bytes;
        }), "blocks did not arrive: " + fetcher.readsInFlight() + " READs, " + fetcher.bytesInFlight() + " bytes");
    }

    @Test
    @Timeout(120)
    void shouldReturnBuffersOfArrivedBlocksWhenClosedBeforeTheyAreTaken(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 13, 4, 1, 50_000, 11);
            try (ShuffleOutputTable table = out.table) {
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
            try (ShuffleOutputTable table = out.table) {
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
            try (ShuffleOutputTable table = out.table;
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

    @Test
    @Timeout(120)
    void shouldFailAsThisExecutorsTroubleNotThePeersWhenThePoolIsExhausted(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = smallPool(reducer, "0ms")) {
            Outputs out = new Outputs(executor, dir, 15, 1, 1, 60_000, 7);
            List<RegisteredBuffer> held = fillTo64kCap(pool); // other tasks hold the pool's 64k buffers
            try (ShuffleOutputTable table = out.table;
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
            try (ShuffleOutputTable table = out.table;
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

    /**
     * A channel whose READs go over the real one, but whose completions reach the fetcher only when the
     * test releases them, post by post.
     */
    private static final class GatedChannel implements RdmaChannel {
        /** One post: its listener and the completions the real channel delivered for it. */
        private static final class Post {
            final ReadListener listener;
            final int reads;
            final List<long[]> completions = new ArrayList<>();

            Post(ReadListener listener, int reads) {
                this.listener = listener;
                this.reads = reads;
            }
        }

        private final RdmaChannel real;
        final List<Post> posts = new ArrayList<>();

        GatedChannel(RdmaChannel real) {
            this.real = real;
        }

        @Override
        public NodeAddress peer() {
            return real.peer();
        }

        @Override
        public void post(ReadBatch batch, ReadListener listener) throws TransportException {
            Post p = new Post(listener, batch.size());
            synchronized (this) {
                posts.add(p);
            }
            real.post(batch, (id, st, len) -> {
                synchronized (p) {
                    p.completions.add(new long[] {id, st, len});
                }
            });
        }

        synchronized int postCount() {
            return posts.size();
        }

        /** Waits until every READ of post {@code i} completed on the real channel (its bytes landed). */
        Post awaitLanded(int i) throws InterruptedException {
            Post p;
            synchronized (this) {
                p = posts.get(i);
            }
            assertTrue(eventually(60, () -> {
                synchronized (p) {
                    return p.completions.size() == p.reads;
                }
            }), "post " + i + " never completed");
            return p;
        }

        /** Hands post {@code i}'s completions to the fetcher, once they all came. */
        void release(int i) throws InterruptedException {
            Post p = awaitLanded(i);
            for (long[] c : p.completions) {
                p.listener.onReadComplete(c[0], (int) c[1], (int) c[2]);
            }
        }

        @Override
        public CompletableFuture<ByteBuffer> call(ByteBuffer request) {
            return real.call(request);
        }

        @Override
        public boolean isOpen() {
            return real.isOpen();
        }

        @Override
        public void close() {
            real.close();
        }
    }

    /** {@code node}, but every channel it connects is {@code gate} (over the real channel). */
    private static RdmaNode gatedNode(RdmaNode node, GatedChannel[] gate) {
        return (RdmaNode) Proxy.newProxyInstance(RdmaNode.class.getClassLoader(), new Class<?>[] {RdmaNode.class},
                (proxy, method, args) -> {
                    try {
                        Object result = method.invoke(node, args);
                        if (method.getName().equals("connect")) {
                            if (gate[0] == null) {
                                gate[0] = new GatedChannel((RdmaChannel) result);
                            }
                            return gate[0];
                        }
                        return result;
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
    }

    @Test
    @Timeout(120)
    void shouldBlameTheOldestPostStillInFlightWhenAnotherStepWasPostedAgainSince(@TempDir Path dir)
            throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 18, 3, 1, 10_000, 13);
            GatedChannel[] gate = new GatedChannel[1];
            try (ShuffleOutputTable table = out.table;
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
            try (ShuffleOutputTable smallTable = small.table;
                 ShuffleOutputTable bigTable = new ShuffleOutputTable(executor, 12, 1)) {
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

    // ---- blocks larger than the pool's largest buffer stream through windows ----

    /** A pool whose largest buffer is 64 KiB (in chunks of 256 KiB): blocks above it stream. */
    private static final RdmaShuffleConf SMALL_POOL = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
            "spark.shuffle.rdma.pool.leakDetection", "paranoid", "spark.shuffle.rdma.pool.maxBufferSize", "64k",
            "spark.shuffle.rdma.pool.chunkSize", "256k"));
    private static final int WINDOW = 64 << 10;

    /**
     * One map output of three partitions — small, 11 windows and a bit, small — registered as regions
     * of 100,000 bytes, so windows cross region boundaries.
     */
    private static ShuffleOutputTable publishLarge(RdmaNode executor, Path dir, int shuffleId, byte[] data,
                                                   long[] offsets) throws Exception {
        new SplittableRandom(shuffleId).nextBytes(data);
        Path f = dir.resolve("shuffle_" + shuffleId + "_0_0.data");
        Files.write(f, data);
        ShuffleOutputTable table = new ShuffleOutputTable(executor, shuffleId, 1);
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
             ShuffleOutputTable table = publishLarge(executor, dir, 20, data, offsets);
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
            ShuffleOutputTable table = publishLarge(executor, dir, 21, data, offsets);
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
             ShuffleOutputTable table = publishLarge(executor, dir, 22, data, offsets);
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
             ShuffleOutputTable ta = publishLarge(peerA, dir, 30, a, new long[] {0, a.length});
             ShuffleOutputTable tb = publishLarge(peerB, dir, 31, b, new long[] {0, b.length});
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
             ShuffleOutputTable table = new ShuffleOutputTable(executor, 23, 1);
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
