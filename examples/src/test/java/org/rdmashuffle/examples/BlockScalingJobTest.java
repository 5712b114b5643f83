package org.rdmashuffle.examples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.Test;
import scala.Tuple2;

class BlockScalingJobTest {
    @Test
    void shouldParseSizesAndRefuseMalformedOnes() {
        assertEquals(new BlockScalingJob.Size(300, 200), BlockScalingJob.Size.parse(" 300X200 "));
        assertEquals(0, BlockScalingJob.Size.parse("0x0").blocks());
        for (String bad : new String[] {"300", "1x2x3", "0x5", "-1x4", "ax3"}) {
            assertThrows(IllegalArgumentException.class, () -> BlockScalingJob.Size.parse(bad), bad);
        }
    }

    @Test
    void shouldWriteOneRecordToEveryReducerWithValuesSummingToTheExpectation() {
        BlockScalingJob.Size z = new BlockScalingJob.Size(7, 13);
        Set<Long> values = new HashSet<>();
        long sum = 0;
        for (int m = 0; m < z.maps(); m++) {
            Set<Integer> reducers = new HashSet<>();
            for (Tuple2<Integer, Long> r : BlockScalingJob.mapOutput(z, m)) {
                assertTrue(reducers.add(r._1()), "one record per reducer");
                assertTrue(values.add(r._2()), "values unique");
                sum += r._2();
            }
            assertEquals(z.reducers(), reducers.size());
        }
        assertArrayEquals(new long[] {z.blocks(), sum}, z.expected());
        assertEquals(91, z.blocks());
    }

    @Test
    void shouldNotOverflowAtTheLargestSize() {
        BlockScalingJob.Size z = new BlockScalingJob.Size(1000, 1000);
        assertArrayEquals(new long[] {1_000_000L, 499_999_500_000L}, z.expected());
        assertEquals(999_999, z.value(999, 999));
    }
}
