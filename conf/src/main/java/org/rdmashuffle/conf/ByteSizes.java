package org.rdmashuffle.conf;

import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Parses and formats byte sizes in Spark's notation: a whole number with an optional suffix
 * {@code b, k/kb, m/mb, g/gb, t/tb, p/pb} (binary multiples, case-insensitive). A bare number is
 * bytes. Fractions are refused, as Spark refuses them.
 */
public final class ByteSizes {
    private static final Pattern FORM = Pattern.compile("([0-9]+)\\s*([a-z]*)");

    private ByteSizes() {
    }

    /** Returns the number of bytes {@code text} denotes; throws with the reason when it denotes none. */
    public static long parse(String text) {
        String s = text.trim().toLowerCase(Locale.ROOT);
        Matcher m = FORM.matcher(s);
        if (!m.matches()) {
            throw new IllegalArgumentException("not a byte size (expected e.g. 512k, 48m, 1g)");
        }
        long shift;
        switch (m.group(2)) {
            case "", "b" -> shift = 0;
            case "k", "kb" -> shift = 10;
            case "m", "mb" -> shift = 20;
            case "g", "gb" -> shift = 30;
            case "t", "tb" -> shift = 40;
            case "p", "pb" -> shift = 50;
            default -> throw new IllegalArgumentException(
                    "unknown size suffix '" + m.group(2) + "' (accepted: b, k, m, g, t, p)");
        }
        long value;
        try {
            value = Long.parseLong(m.group(1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("byte size out of range");
        }
        if (value > (Long.MAX_VALUE >> shift)) {
            throw new IllegalArgumentException("byte size out of range");
        }
        return value << shift;
    }

    /** Formats {@code bytes} in the largest unit that divides it exactly, e.g. {@code 48m}. */
    public static String format(long bytes) {
        String[] units = {"p", "t", "g", "m", "k"};
        int[] shifts = {50, 40, 30, 20, 10};
        for (int i = 0; i < units.length; i++) {
            long unit = 1L << shifts[i];
            if (bytes != 0 && bytes % unit == 0) {
                return (bytes / unit) + units[i];
            }
        }
        return bytes + "b";
    }
}
