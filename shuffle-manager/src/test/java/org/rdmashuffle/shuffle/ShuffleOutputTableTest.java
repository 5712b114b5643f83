package org.rdmashuffle.shuffle;

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
             ShuffleOutputTable table = new ShuffleOutputTable(executor, 5, 3)) {
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
                        sinkMem.duplicate().limit((int) md.length()));
                assertEquals(s.regionCount(), meta.regions().length);
                for (int p = 0; p < 4; p++) {
                    int[] at = {0};
                    ReadBatch b = new ReadBatch(8);
                    int n = meta.layout().forEachPiece(p, p + 1, 32 << 10, (r, off, len) -> {
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

    @Test
    void shouldRejectCorruptMetadataWhenParsed() {
        ByteBuffer b = ByteBuffer.allocate(24).putInt(1000).putInt(4).putLong(1 << 20).putLong(7).flip();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> ShuffleOutputTable.Metadata.parse(b));
        assertTrue(e.getMessage().contains("corrupt map output metadata"), e.getMessage());
        ByteBuffer shortHeader = ByteBuffer.allocate(16).putInt(0).putInt(4).putLong(1 << 20).flip();
        e = assertThrows(IllegalArgumentException.class, () -> ShuffleOutputTable.Metadata.parse(shortHeader));
        assertTrue(e.getMessage().contains("corrupt map output metadata"), e.getMessage());
        ByteBuffer s = ByteBuffer.allocate(32).putInt(0, 77);
        assertThrows(IllegalArgumentException.class, () -> ShuffleOutputTable.Slot.parse(s));
    }
}
