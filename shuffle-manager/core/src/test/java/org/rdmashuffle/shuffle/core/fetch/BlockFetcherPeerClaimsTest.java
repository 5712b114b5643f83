package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.CONF;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.MAPS;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.PARTS;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.gatedNode;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.GatedChannel;
import org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.Outputs;
import org.rdmashuffle.shuffle.core.directory.MetadataCache;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * What a peer claims — its slot, metadata, offsets and sizes — is checked before it is believed ({@link PeerClaims}):
 * a map it does not hold goes to Spark's path, a lie fails the request naming it and never costs this executor a
 * buffer of the claimed size, and a claim torn by a rewrite is READ again.
 */
class BlockFetcherPeerClaimsTest {
    private final byte[][] data = new byte[MAPS][];
    private final long[][] offsets = new long[MAPS][];

    private RegisteredOutputTable publish(RdmaNode executor, Path dir) throws Exception {
        return FetcherFixtures.publish(executor, dir, data, offsets);
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

    /**
     * Fetches through a forged slot claiming {@code regions} regions, with a metadata length that fits them and
     * the shuffle's partitions exactly; checks that only the slot's buffers were taken and none is left in use.
     *
     * @return the failure's message
     */
    private String failureOfASlotClaiming(Path dir, int regions) throws Exception {
        return failureOfASlotClaiming(dir, regions, ShuffleOutputTable.metadataBytes(regions, PARTS), 2, 3);
    }

    /**
     * Fetches partitions {@code [start, end)} through a forged slot of a real table claiming {@code regions}
     * regions in {@code metadataBytes} of metadata; checks that only the slot's buffers were taken (the slot
     * READ again in case a rewrite tore it, never the claimed metadata) and none is left in use.
     *
     * @return the failure's message
     */
    private String failureOfASlotClaiming(Path dir, int regions, long metadataBytes, int start, int end)
            throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             RegisteredOutputTable table = publish(executor, dir);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 20_000)) {
            ByteBuffer slots = ByteBuffer.allocateDirect(ShuffleOutputTable.SLOT_BYTES);
            RegionDescriptor real = table.descriptor();
            slots.putInt(1).putInt(regions).putLong(0).putLong(real.address()).putInt(real.rkey())
                    .putInt((int) metadataBytes).clear();
            try (MemoryRegion forged = executor.register(slots, RegionAccess.REMOTE_READ)) {
                FetchFailure f = failureOf(fetcher, new BlockFetcher.Request(executor.localAddress(),
                        forged.descriptor(), 0, 0, start, end, new BlockFetcher.Expected(PARTS, 1, 1 << 20)));
                assertEquals(1 + PeerClaims.MAX_TORN_SLOT_READS, pool.stats().acquires(),
                        "only the slot's buffers may be taken: " + pool.stats());
                assertEquals(0, pool.stats().inUseBuffers());
                return f.getMessage();
            }
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
    void shouldHandAMapTheTableDoesNotHoldToSparksPathAndFailNamingTheMapWhenThePeerIsGone(@TempDir Path dir)
            throws Exception {
        try (RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 20_000)) {
            RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
            RegisteredOutputTable table = publish(executor, dir);
            BlockFetcher.Request missing = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), MAPS, -1,
                    0, 1);
            fetcher.add(missing); // an empty slot: migrated there by decommissioning, or lost
            try (BlockFetcher.Block b = fetcher.next()) {
                assertEquals(missing, b.request());
                assertTrue(b.unregistered(), "a map its table does not hold goes through Spark's path");
                assertEquals(BlockFetcher.NOT_IN_TABLE, b.viaEngineReason());
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
             RegisteredOutputTable table = publish(executor, dir);
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
        // A lying peer's table: map index 0 published, its metadata said to be 64 MiB.
        String f = failureOfASlotClaiming(dir, 1, 64 << 20, 0, 1);
        assertTrue(f.contains("corrupt output table"), f);
        assertTrue(f.contains("metadata of " + (64 << 20) + " bytes"), f);
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             RegisteredOutputTable table = publish(executor, dir);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 20_000)) {
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
        // A lying peer's slot: 70 million regions, and a metadata length that fits them and the shuffle's
        // partitions exactly, so the length check passes: its header and descriptors alone would be 1.1 GB,
        // above the pool's cap (1 GiB). Before: a BufferPoolException ("exceeds the cap"), which blames no
        // peer and fails the task.
        int regions = 70_000_000;
        long claimed = ShuffleOutputTable.metadataBytes(regions, PARTS);
        assertTrue(claimed > CONF.poolMaxRegisteredBytes() && claimed < Integer.MAX_VALUE, "claimed " + claimed);
        String f = failureOfASlotClaiming(dir, regions);
        assertTrue(f.contains("corrupt output table"), f);
    }

    /**
     * A lying peer's slot claims two million regions (1-byte ones would do), with a metadata length that fits
     * them exactly and stays far below the pool's cap: refused from the slot, before a buffer is taken for the
     * metadata or a descriptor allocated for each region — a reader's heap is not the peer's to fill.
     */
    @Test
    @Timeout(60)
    void shouldRefuseASlotClaimingMoreRegionsThanAnyMapOutputHasBeforeTakingABufferOrParsingThem(@TempDir Path dir)
            throws Exception {
        int regions = 2_000_000;
        assertTrue(ShuffleOutputTable.metadataBytes(regions, PARTS) < CONF.poolMaxRegisteredBytes());
        String f = failureOfASlotClaiming(dir, regions);
        assertTrue(f.contains("2000000 regions, more than any map output has"), f);
        // the same claim in metadata itself is refused before a descriptor is allocated
        ByteBuffer header = ByteBuffer.allocate(64).putInt(ShuffleOutputTable.MAX_REGIONS + 1).putInt(PARTS)
                .putLong(1).putLong(0).clear();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ShuffleOutputTable.Metadata
                .parse(header, new RegionDescriptor(0, ShuffleOutputTable.metadataBytes(
                        ShuffleOutputTable.MAX_REGIONS + 1, PARTS), 1)));
        assertTrue(e.getMessage().contains((ShuffleOutputTable.MAX_REGIONS + 1) + " regions"), e.getMessage());
        // and a writer leaves such an output to the engine's path rather than publish it
        assertThrows(IllegalArgumentException.class, () -> new MapOutputLayout(
                new long[] {0, (ShuffleOutputTable.MAX_REGIONS + 1L) * 4096}, 4096));
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
            try (RegisteredOutputTable table = out.table;
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
}
