package org.rdmashuffle.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;
import scala.Tuple2;

class TeraRecordsTest {
    private static Tuple2<byte[], byte[]> rec(int key) {
        byte[] k = new byte[TeraRecords.KEY_BYTES];
        k[0] = (byte) key; // unsigned order: 0x80.. sorts after 0x7f..
        return new Tuple2<>(k, new byte[TeraRecords.VALUE_BYTES]);
    }

    private static TeraRecords.PartitionDigest digest(int partition, int... keys) {
        return TeraRecords.PartitionDigest.of(partition, java.util.Arrays.stream(keys).mapToObj(TeraRecordsTest::rec)
                .iterator());
    }

    private static long checksum(int... keys) {
        long sum = 0;
        for (int k : keys) {
            sum += TeraRecords.crc(rec(k)._1(), rec(k)._2());
        }
        return sum;
    }

    @Test
    void shouldAcceptGloballySortedPartitionsWithTheGeneratedCountAndChecksum() {
        List<TeraRecords.PartitionDigest> ds = List.of(digest(0, 1, 2, 0x7f), digest(1), digest(2, 0x80, 0xff));
        assertEquals(List.of(), TeraRecords.validate(ds, 5, checksum(1, 2, 0x7f, 0x80, 0xff)));
    }

    @Test
    void shouldReportEveryProblemWhenOrderCountOrChecksumIsWrong() {
        TeraRecords.PartitionDigest unsorted = digest(0, 5, 3);
        assertFalse(unsorted.ordered());
        List<String> problems = TeraRecords.validate(List.of(unsorted, digest(1, 2, 9)), 5,
                checksum(5, 3, 2, 9) + 1);
        assertEquals(4, problems.size(), problems.toString());
        assertTrue(problems.get(0).contains("partition 0 is not sorted"), problems.toString());
        assertTrue(problems.get(1).contains("partition 1 starts below"), problems.toString());
        assertTrue(problems.get(2).contains("4 records sorted, 5 generated"), problems.toString());
        assertTrue(problems.get(3).startsWith("checksum"), problems.toString());
    }

    @Test
    void shouldSortKeysAsUnsignedBytes() {
        assertTrue(new TeraRecords.KeyOrder().compare(rec(0x7f)._1(), rec(0x80)._1()) < 0);
    }
}
