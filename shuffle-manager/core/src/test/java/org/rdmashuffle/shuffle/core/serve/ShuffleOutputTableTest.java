package org.rdmashuffle.shuffle.core.serve;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/** A reducer finds and reads map outputs through the table with one-sided READs only. */
class ShuffleOutputTableTest {
    private static final RdmaShuffleConf TCP = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp"));

    private static int read(RdmaChannel ch, long address, int rkey, int len, MemoryRegion sink) throws Exception {
        CompletableFuture<Integer> f = new CompletableFuture<>();
        ch.post(new ReadBatch(1).add(address, rkey, len, sink, 0, 0), (id, st, n) -> f.complete(st));
        return f.get(10, TimeUnit.SECONDS);
    }

    @Test
    @Timeout(60)
    void shouldLetReducerLocateAndReadPartitionsWhenOutputsArePublished(@TempDir Path dir) throws Exception {
        SplittableRandom rnd = new SplittableRandom(12);
        byte[][] files = new byte[3][];
        long[][] offsets = new long[3][];
        try (RdmaNode executor = RdmaTransport.open(TCP, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(TCP, NodeOptions.loopback());
             RegisteredOutputTable table = new RegisteredOutputTable(executor, 5, 3)) {
            for (int m : new int[] {0, 2}) {
                int parts = 4;
                offsets[m] = new long[parts + 1];
                for (int p = 1; p <= parts; p++) {
                    offsets[m][p] = offsets[m][p - 1] + rnd.nextInt(100_000);
                }
                files[m] = new byte[(int) offsets[m][parts]];
                rnd.nextBytes(files[m]);
                Path f = dir.resolve("shuffle_5_" + m + "_0.data");
                Files.write(f, files[m]);
                table.publish(m, 1000 + m, RegisteredMapOutput.register(executor, f,
                        new MapOutputLayout(offsets[m], 64 << 10)));
            }
            long published = files[0].length + files[2].length;
            assertEquals(published, table.registeredOutputBytes());

            ByteBuffer sinkMem = ByteBuffer.allocateDirect(1 << 20);
            MemoryRegion sink = reducer.register(sinkMem, RegionAccess.READ_SINK);
            RdmaChannel ch = reducer.connect(executor.localAddress());
            RegionDescriptor t = table.descriptor();
            assertEquals(ReadStatus.SUCCESS, read(ch, t.address(), t.rkey(), 3 * ShuffleOutputTable.SLOT_BYTES, sink));
            ByteBuffer slots = ByteBuffer.allocate(3 * ShuffleOutputTable.SLOT_BYTES);
            slots.put(sinkMem.duplicate().limit(3 * ShuffleOutputTable.SLOT_BYTES)).clear();
            assertFalse(ShuffleOutputTable.Slot.parse(slots.duplicate().position(ShuffleOutputTable.SLOT_BYTES))
                    .published(), "map index 1 was never published");
            for (int m : new int[] {0, 2}) {
                ShuffleOutputTable.Slot s = ShuffleOutputTable.Slot.parse(
                        slots.duplicate().position(m * ShuffleOutputTable.SLOT_BYTES));
                assertTrue(s.published());
                assertEquals(1000 + m, s.mapId());
                RegionDescriptor md = s.metadata();
                assertEquals(ReadStatus.SUCCESS, read(ch, md.address(), md.rkey(), (int) md.length(), sink));
                ShuffleOutputTable.Metadata meta = ShuffleOutputTable.Metadata.parse(
                        sinkMem.duplicate().limit((int) md.length()), md);
                assertEquals(s.regionCount(), meta.regions().length);
                assertEquals(files[m].length, meta.totalBytes());
                long[] offs = new long[5];
                meta.readOffsets(sinkMem.duplicate().position((int) meta.offsetPosition(0)), 0, 4, offs);
                assertEquals(java.util.Arrays.toString(offsets[m]), java.util.Arrays.toString(offs));
                for (int p = 0; p < 4; p++) {
                    int[] at = {0};
                    ReadBatch b = new ReadBatch(8);
                    int n = MapOutputLayout.forEachPiece(offs[p], offs[p + 1], meta.maxRegionBytes(), 32 << 10,
                            (r, off, len) -> {
                        b.add(meta.regions()[r].address() + off, meta.regions()[r].rkey(), len, sink, at[0], at[0]);
                        at[0] += len;
                    });
                    CompletableFuture<Void> all = new CompletableFuture<>();
                    int[] left = {n};
                    if (n == 0) {
                        all.complete(null);
                    }
                    ch.post(b, (id, st, len) -> {
                        if (st != ReadStatus.SUCCESS) {
                            all.completeExceptionally(new AssertionError(ReadStatus.describe(st)));
                        } else if (--left[0] == 0) {
                            all.complete(null);
                        }
                    });
                    all.get(10, TimeUnit.SECONDS);
                    ByteBuffer expected = ByteBuffer.wrap(files[m], (int) offsets[m][p],
                            (int) (offsets[m][p + 1] - offsets[m][p]));
                    assertEquals(-1, sinkMem.duplicate().limit(at[0]).mismatch(expected), "map " + m + " part " + p);
                }
            }

            // Withdrawing an output: its slot reads empty and its old keys fail.
            ShuffleOutputTable.Slot before = ShuffleOutputTable.Slot.parse(slots.duplicate().position(0));
            table.remove(0);
            assertEquals(ReadStatus.SUCCESS, read(ch, t.address(), t.rkey(), ShuffleOutputTable.SLOT_BYTES, sink));
            assertFalse(ShuffleOutputTable.Slot.parse(sinkMem.duplicate()).published());
            assertEquals(ReadStatus.UNKNOWN_KEY, read(ch, before.metadata().address(), before.metadata().rkey(), 8,
                    sink));
            assertEquals(files[2].length, table.registeredOutputBytes());
            sink.close();
            table.close();
            assertEquals(0, executor.stats().registeredBytes(), "table close left registrations behind");
            assertThrows(IllegalStateException.class, () -> table.publish(1, 1, RegisteredMapOutput.register(
                    executor, dir.resolve("shuffle_5_2_0.data"), new MapOutputLayout(offsets[2], 64 << 10))));
            assertEquals(0, executor.stats().registeredBytes());
        }
    }

    /** A metadata header and descriptors of regions {@code lengths}, each of at most {@code maxRegion} bytes. */
    private static ByteBuffer head(int partitions, long maxRegion, long... lengths) {
        ByteBuffer b = ByteBuffer.allocate(24 + lengths.length * RegionDescriptor.ENCODED_BYTES);
        b.putInt(lengths.length).putInt(partitions).putLong(maxRegion).putLong(7);
        for (long l : lengths) {
            new RegionDescriptor(1L << 32, l, 5).writeTo(b);
        }
        return b.flip();
    }

    private static RegionDescriptor where(int regions, int partitions) {
        return new RegionDescriptor(2L << 32, ShuffleOutputTable.metadataBytes(regions, partitions), 9);
    }

    private static void assertCorrupt(org.junit.jupiter.api.function.Executable parse) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, parse);
        assertTrue(e.getMessage().contains("corrupt map output metadata") || e.getMessage().contains("outside"),
                e.getMessage());
    }

    @Test
    @Timeout(60)
    void shouldHideTheTableAtOnceAndKeepItsOutputsUntilClosedWhenWithdrawn(@TempDir Path dir) throws Exception {
        Path f = dir.resolve("shuffle_6_0_0.data");
        Files.write(f, new byte[300]);
        try (RdmaNode executor = RdmaTransport.open(TCP, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(TCP, NodeOptions.loopback());
             RegisteredOutputTable table = new RegisteredOutputTable(executor, 6, 2)) {
            table.publish(0, 7, RegisteredMapOutput.register(executor, f, new MapOutputLayout(new long[] {0, 300}, 4096)));
            int regions = executor.stats().registeredRegions();
            MemoryRegion sink = reducer.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK);
            RdmaChannel ch = reducer.connect(executor.localAddress());
            RegionDescriptor t = table.descriptor();
            assertEquals(ReadStatus.SUCCESS, read(ch, t.address(), t.rkey(), ShuffleOutputTable.SLOT_BYTES, sink));

            table.withdraw(); // O(1): the table region only
            assertEquals(ReadStatus.UNKNOWN_KEY, read(ch, t.address(), t.rkey(), ShuffleOutputTable.SLOT_BYTES, sink));
            assertEquals(regions - 1, executor.stats().registeredRegions());
            assertEquals(300, table.registeredOutputBytes(), "the outputs stay registered until the table is closed");
            assertThrows(IllegalStateException.class, () -> table.publishUnregistered(1, 8));

            table.close();
            assertEquals(0, table.registeredOutputBytes());
            assertEquals(0, executor.stats().registeredRegions(), "the output's data and metadata regions are gone too");
        }
    }

    @Test
    @Timeout(60)
    void shouldKeepAnAttemptsLentRegionsRegisteredUntilClosedWhenAnotherAttemptReplacesIt(@TempDir Path dir)
            throws Exception {
        byte[] first = new byte[300];
        byte[] second = new byte[300];
        new SplittableRandom(3).nextBytes(first);
        new SplittableRandom(4).nextBytes(second);
        Path a = Files.write(dir.resolve("attempt_0.data"), first);
        Path b = Files.write(dir.resolve("attempt_1.data"), second);
        Path c = Files.write(dir.resolve("attempt_2.data"), second);
        MapOutputLayout layout = new MapOutputLayout(new long[] {0, 300}, 4096);
        try (RdmaNode executor = RdmaTransport.open(TCP, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(TCP, NodeOptions.loopback());
             RegisteredOutputTable table = new RegisteredOutputTable(executor, 7, 1)) {
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(4096);
            MemoryRegion sink = reducer.register(sinkMem, RegionAccess.READ_SINK);
            RdmaChannel ch = reducer.connect(executor.localAddress());
            table.publish(0, 0, RegisteredMapOutput.register(executor, a, layout));
            RegionDescriptor lent = table.dataRegions(0, 0)[0]; // a reader holds attempt 0's location
            table.publish(0, 1, RegisteredMapOutput.register(executor, b, layout)); // a rerun replaces it
            assertEquals(null, table.dataRegions(0, 0), "no location of a replaced attempt is handed out");
            // (on verbs the device may give a deregistered rkey, and the kernel its addresses, to a later region:
            // only a region still registered keeps a stale descriptor from READing another attempt's bytes)
            assertEquals(ReadStatus.SUCCESS, read(ch, lent.address(), lent.rkey(), 300, sink));
            byte[] got = new byte[300];
            sinkMem.duplicate().get(got);
            assertTrue(java.util.Arrays.equals(first, got), "the lent location READs its own attempt's bytes");
            assertEquals(600, table.registeredOutputBytes(), "the replaced attempt's bytes stay registered");

            // an attempt never lent is released at once when replaced, as before
            table.publish(0, 2, RegisteredMapOutput.register(executor, c, layout));
            assertEquals(600, table.registeredOutputBytes());

            table.close();
            assertEquals(0, table.registeredOutputBytes());
            assertEquals(ReadStatus.UNKNOWN_KEY, read(ch, lent.address(), lent.rkey(), 300, sink));
            assertEquals(0, executor.stats().registeredRegions(), "every region is gone with the table");
        }
    }

    @Test
    void shouldRejectCorruptMetadataWhenParsed() {
        ByteBuffer b = ByteBuffer.allocate(24).putInt(1000).putInt(4).putLong(1 << 20).putLong(7).flip();
        assertCorrupt(() -> ShuffleOutputTable.Metadata.parse(b, where(1000, 4)));
        ByteBuffer shortHeader = ByteBuffer.allocate(16).putInt(0).putInt(4).putLong(1 << 20).flip();
        assertCorrupt(() -> ShuffleOutputTable.Metadata.parse(shortHeader, where(0, 4)));
        // the region's length does not fit the counts the header gives
        assertCorrupt(() -> ShuffleOutputTable.Metadata.parse(head(4, 100, 100, 50), where(2, 5)));
        // a region other than the last shorter than the others, a last one longer, regions of 0 bytes
        assertCorrupt(() -> ShuffleOutputTable.Metadata.parse(head(4, 100, 60, 50), where(2, 4)));
        assertCorrupt(() -> ShuffleOutputTable.Metadata.parse(head(4, 100, 100, 150), where(2, 4)));
        assertCorrupt(() -> ShuffleOutputTable.Metadata.parse(head(4, 0, 0), where(1, 4)));

        ShuffleOutputTable.Metadata m = ShuffleOutputTable.Metadata.parse(head(4, 100, 100, 50), where(2, 4));
        assertEquals(150, m.totalBytes());
        assertEquals(24 + 2 * RegionDescriptor.ENCODED_BYTES + 3 * 8, m.offsetPosition(3));
        long[] out = new long[5];
        m.readOffsets(offsets(0, 10, 10, 120, 150), 0, 4, out);
        assertEquals(120, out[3]);
        m.readOffsets(offsets(10, 120), 2, 3, out);
        assertEquals(10, out[0]);
        assertCorrupt(() -> m.readOffsets(offsets(0, 10, 5, 120, 150), 0, 4, out)); // decreasing
        assertCorrupt(() -> m.readOffsets(offsets(120, 151), 3, 4, out)); // beyond the data
        assertCorrupt(() -> m.readOffsets(offsets(120, 149), 3, 4, out)); // the last is not the data's length
        assertCorrupt(() -> m.readOffsets(offsets(3, 10), 0, 1, out)); // the first is not 0
        assertCorrupt(() -> m.readOffsets(offsets(-1, 10), 1, 2, out));
        assertCorrupt(() -> m.readOffsets(offsets(0, 0), 4, 5, out)); // window outside the partitions
        assertCorrupt(() -> m.readOffsets(offsets(0, 0), 2, 1, out));
        ByteBuffer s = ByteBuffer.allocate(32).putInt(0, 77);
        assertThrows(IllegalArgumentException.class, () -> ShuffleOutputTable.Slot.parse(s));
    }

    private static ByteBuffer offsets(long... values) {
        ByteBuffer b = ByteBuffer.allocate(values.length * 8);
        for (long v : values) {
            b.putLong(v);
        }
        return b.flip();
    }

    @Test
    @Timeout(60)
    void shouldKeepNoOffsetsOnTheHeapOnceAnOutputIsPublished(@TempDir Path dir) throws Exception {
        long[] offsets = {0, 10, 10, 300};
        Path f = dir.resolve("shuffle_6_0_0.data");
        Files.write(f, new byte[300]);
        try (RdmaNode executor = RdmaTransport.open(TCP, NodeOptions.loopback());
             RegisteredOutputTable table = new RegisteredOutputTable(executor, 6, 1)) {
            RegisteredMapOutput out = RegisteredMapOutput.register(executor, f, new MapOutputLayout(offsets, 128));
            assertEquals(3, out.layout().numPartitions());
            table.publish(0, 4, out);
            // the metadata region holds them now; the output keeps its length, not the layout
            IllegalStateException e = assertThrows(IllegalStateException.class, out::layout);
            assertTrue(e.getMessage().contains("metadata region"), e.getMessage());
            assertEquals(300, out.registeredBytes());
            assertEquals(300, table.registeredOutputBytes());
        }
    }
}
