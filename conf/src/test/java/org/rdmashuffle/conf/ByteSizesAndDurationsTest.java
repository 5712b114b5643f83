package org.rdmashuffle.conf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

class ByteSizesAndDurationsTest {

    @Test
    void shouldParseSparkByteSuffixesWhenGiven() {
        assertEquals(100, ByteSizes.parse("100"));
        assertEquals(100, ByteSizes.parse("100b"));
        assertEquals(48L << 20, ByteSizes.parse("48m"));
        assertEquals(48L << 20, ByteSizes.parse("48MB"));
        assertEquals(1L << 30, ByteSizes.parse(" 1g "));
        assertEquals(3L << 40, ByteSizes.parse("3t"));
        assertEquals(2L << 50, ByteSizes.parse("2pb"));
    }

    @Test
    void shouldRefuseFractionsAndUnknownSuffixesWhenParsingSizes() {
        assertThrows(IllegalArgumentException.class, () -> ByteSizes.parse("1.5g"));
        assertThrows(IllegalArgumentException.class, () -> ByteSizes.parse("10x"));
        assertThrows(IllegalArgumentException.class, () -> ByteSizes.parse("-1k"));
        assertThrows(IllegalArgumentException.class, () -> ByteSizes.parse("99999999999p"));
        assertThrows(IllegalArgumentException.class, () -> ByteSizes.parse(""));
    }

    @Test
    void shouldFormatInLargestExactUnit() {
        assertEquals("48m", ByteSizes.format(48L << 20));
        assertEquals("1536k", ByteSizes.format(1536L << 10));
        assertEquals("100b", ByteSizes.format(100));
        assertEquals("0b", ByteSizes.format(0));
    }

    @Test
    void shouldParseSparkTimeSuffixesWhenGiven() {
        assertEquals(250, Durations.parseMillis("250"));
        assertEquals(250, Durations.parseMillis("250ms"));
        assertEquals(30_000, Durations.parseMillis("30s"));
        assertEquals(120_000, Durations.parseMillis("2min"));
        assertEquals(120_000, Durations.parseMillis("2m"));
        assertEquals(3_600_000, Durations.parseMillis("1h"));
        assertEquals(86_400_000, Durations.parseMillis("1d"));
        assertEquals(2, Durations.parseMillis("1500us"));
        assertThrows(IllegalArgumentException.class, () -> Durations.parseMillis("1.5s"));
        assertThrows(IllegalArgumentException.class, () -> Durations.parseMillis("5 parsecs"));
        assertEquals("30s", Durations.formatMillis(30_000));
        assertEquals("2min", Durations.formatMillis(120_000));
        assertEquals("1h", Durations.formatMillis(3_600_000));
        assertEquals("1500ms", Durations.formatMillis(1500));
    }
}
