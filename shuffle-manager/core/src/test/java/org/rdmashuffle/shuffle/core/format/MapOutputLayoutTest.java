package org.rdmashuffle.shuffle.core.format;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class MapOutputLayoutTest {

    private static List<long[]> pieces(MapOutputLayout l, int start, int end, int readBytes) {
        List<long[]> out = new ArrayList<>();
        l.forEachPiece(start, end, readBytes, (r, off, len) -> out.add(new long[] {r, off, len}));
        return out;
    }

    @Test
    void shouldSplitFileIntoRegionsAtTheLimitWhenOutputIsLarger() {
        MapOutputLayout l = new MapOutputLayout(new long[] {0, 100, 250, 250, 1000}, 300);
        assertEquals(4, l.numPartitions());
        assertEquals(4, l.regionCount());
        assertEquals(0, l.regionStart(0));
        assertEquals(900, l.regionStart(3));
        assertEquals(300, l.regionLength(0));
        assertEquals(100, l.regionLength(3));
        assertEquals(0, l.bytesOf(2, 3));
        assertThrows(IndexOutOfBoundsException.class, () -> l.regionLength(4));
    }

    @Test
    void shouldCutPiecesAtRegionBoundariesAndReadSize() {
        MapOutputLayout l = new MapOutputLayout(new long[] {0, 100, 250, 250, 1000}, 300);
        // Partition 3 is bytes [250, 1000): regions 0 (250..300), 1, 2, 3 (900..1000), reads of at most 200.
        List<long[]> p = pieces(l, 3, 4, 200);
        long[][] expected = {{0, 250, 50}, {1, 0, 200}, {1, 200, 100}, {2, 0, 200}, {2, 200, 100}, {3, 0, 100}};
        assertEquals(expected.length, p.size());
        for (int i = 0; i < expected.length; i++) {
            assertEquals(List.of(expected[i][0], expected[i][1], expected[i][2]),
                    List.of(p.get(i)[0], p.get(i)[1], p.get(i)[2]), "piece " + i);
        }
        assertEquals(0, l.forEachPiece(2, 3, 200, (r, o, n) -> { throw new AssertionError("empty partition"); }));
    }

    @Test
    void shouldCoverEveryByteExactlyOnceWhenRangesAreRandom() {
        SplittableRandom rnd = new SplittableRandom(9);
        for (int round = 0; round < 200; round++) {
            int parts = 1 + rnd.nextInt(50);
            long[] offs = new long[parts + 1];
            for (int i = 1; i <= parts; i++) {
                offs[i] = offs[i - 1] + (rnd.nextInt(4) == 0 ? 0 : rnd.nextInt(5000));
            }
            long limit = 1 + rnd.nextInt(3000);
            MapOutputLayout l = new MapOutputLayout(offs, limit);
            int s = rnd.nextInt(parts + 1);
            int e = s + rnd.nextInt(parts - s + 1);
            int read = 1 + rnd.nextInt(2000);
            long[] next = {offs[s]};
            l.forEachPiece(s, e, read, (r, off, len) -> {
                long fileOff = l.regionStart(r) + off;
                assertEquals(next[0], fileOff, "gap or overlap");
                assertTrue(len >= 1 && len <= read, "length " + len);
                assertTrue(off + len <= l.regionLength(r), "crosses region " + r);
                next[0] += len;
            });
            assertEquals(offs[e], next[0], "range not covered");
        }
    }

    @Test
    void shouldHaveNoRegionsWhenOutputIsEmpty() {
        MapOutputLayout l = new MapOutputLayout(new long[] {0, 0, 0}, 1 << 20);
        assertEquals(0, l.regionCount());
        assertEquals(0, l.forEachPiece(0, 2, 4096, (r, o, n) -> { throw new AssertionError(); }));
    }

    @Test
    void shouldRejectOffsetsThatAreNotAnIndexWhenConstructed() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> new MapOutputLayout(new long[] {0, 10, 5}, 100));
        assertTrue(e.getMessage().contains("decrease at partition 1"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new MapOutputLayout(new long[] {3, 10}, 100));
        assertThrows(IllegalArgumentException.class, () -> new MapOutputLayout(new long[] {0, 10}, 0));
        assertThrows(IndexOutOfBoundsException.class,
                () -> new MapOutputLayout(new long[] {0, 10}, 100).bytesOf(0, 2));
    }
}
