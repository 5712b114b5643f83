package org.rdmashuffle.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.Iterator;
import java.util.Set;
import org.junit.jupiter.api.Test;
import scala.Tuple2;

class FetchBoundJobTest {
    private static final int BYTES = 4096;

    @Test
    void shouldFindNoWrongWordInAGeneratedRecordAtAnyStride() {
        byte[] v = FetchBoundJob.value(12345, BYTES);
        for (int stride : new int[] {1, 7, 32, 511, 512, 10_000}) {
            assertEquals(0, FetchBoundJob.badWords(12345, v, BYTES, stride), "stride " + stride);
        }
    }

    @Test
    void shouldCountAFlippedByteInACheckedWordAndTheLastWordAlways() {
        byte[] v = FetchBoundJob.value(7, BYTES);
        v[8 * 64 + 3] ^= 1; // word 64: checked at stride 32 and 1, not at stride 512
        assertEquals(1, FetchBoundJob.badWords(7, v, BYTES, 1));
        assertEquals(1, FetchBoundJob.badWords(7, v, BYTES, 32));
        assertEquals(0, FetchBoundJob.badWords(7, v, BYTES, 48));
        byte[] w = FetchBoundJob.value(7, BYTES);
        w[BYTES - 1] ^= (byte) 0x80; // the last word is checked at every stride
        assertEquals(1, FetchBoundJob.badWords(7, w, BYTES, 100));
    }

    @Test
    void shouldRejectAnotherRecordsValueAndAWrongLength() {
        byte[] other = FetchBoundJob.value(8, BYTES);
        assertTrue(FetchBoundJob.badWords(7, other, BYTES, 32) > 1, "index word and content differ");
        assertEquals(1, FetchBoundJob.badWords(7, new byte[BYTES - 8], BYTES, 32));
    }

    @Test
    void shouldMatchTheExpectedDigestOnlyWhenEveryRecordArrivedOnce() {
        long n = 1000;
        FetchBoundJob.Digest all = FetchBoundJob.Digest.EMPTY;
        FetchBoundJob.Digest missingOne = FetchBoundJob.Digest.EMPTY;
        FetchBoundJob.Digest duplicated = FetchBoundJob.Digest.EMPTY;
        for (int i = 0; i < n; i++) {
            all = all.plusRecord(i, BYTES, 0);
            missingOne = i == 500 ? missingOne : missingOne.plusRecord(i, BYTES, 0);
            duplicated = duplicated.plusRecord(i == 500 ? 499 : i, BYTES, 0);
        }
        FetchBoundJob.Digest expected = FetchBoundJob.Digest.expected(n, BYTES);
        assertEquals(expected, all);
        assertNotEquals(expected, missingOne);
        assertNotEquals(expected, duplicated, "a record delivered twice instead of another");
        assertNotEquals(expected, all.plusRecord(0, 0, 0).plus(FetchBoundJob.Digest.EMPTY));
        assertEquals(all, FetchBoundJob.Digest.of(all.toArray()));
    }

    @Test
    void shouldSplitRecordsAmongMapsWithoutGapOrOverlap() {
        Set<Integer> seen = new HashSet<>();
        long records = 1003;
        int maps = 16;
        assertEquals(0, FetchBoundJob.firstRecord(records, maps, 0));
        assertEquals(records, FetchBoundJob.firstRecord(records, maps, maps));
        for (int m = 0; m < maps; m++) {
            Iterator<Tuple2<Integer, byte[]>> it = FetchBoundJob.records(FetchBoundJob.firstRecord(records, maps, m),
                    FetchBoundJob.firstRecord(records, maps, m + 1), 64);
            while (it.hasNext()) {
                Tuple2<Integer, byte[]> r = it.next();
                assertTrue(seen.add(r._1()), "record " + r._1() + " twice");
                assertEquals(0, FetchBoundJob.badWords(r._1(), r._2(), 64, 1));
            }
        }
        assertEquals(records, seen.size());
    }

    @Test
    void shouldPlaceOnewayMapsOnTheServerAndReducesOnTheOtherAndAlternateBothWays() {
        for (int serving = 0; serving < 2; serving++) {
            for (int t = 0; t < 5; t++) {
                assertEquals(serving, FetchBoundJob.placement(true, true, t, serving));
                assertEquals(1 - serving, FetchBoundJob.placement(true, false, t, serving));
                assertEquals(t % 2, FetchBoundJob.placement(false, true, t, serving));
                assertEquals(t % 2, FetchBoundJob.placement(false, false, t, serving));
            }
        }
    }

    @Test
    void shouldNameTasksThatRanElsewhereThanPinned() {
        PhaseRecorder rec = new PhaseRecorder();
        rec.tasks.add(new PhaseRecorder.Task("map", 0, 0, "1", "h", true, 1, 1, 0, 0, 0, 0, 0));
        rec.tasks.add(new PhaseRecorder.Task("reduce", 1, 1, "1", "h", true, 1, 1, 10, 0, 1, 0, 0));
        assertEquals("", FetchBoundJob.misplaced(rec, new String[] {"1"}, new String[] {"2", "1"}));
        rec.tasks.add(new PhaseRecorder.Task("reduce", 1, 0, "1", "h", true, 1, 1, 10, 0, 1, 0, 0));
        assertEquals("reduce:0@1", FetchBoundJob.misplaced(rec, new String[] {"1"}, new String[] {"2", "1"}));
    }
}
