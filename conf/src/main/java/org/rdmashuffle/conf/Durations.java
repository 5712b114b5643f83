package org.rdmashuffle.conf;

import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Parses and formats times in Spark's notation: a whole number with an optional suffix
 * {@code us, ms, s, m/min, h, d}. A bare number is milliseconds.
 */
public final class Durations {
    private static final Pattern FORM = Pattern.compile("([0-9]+)\\s*([a-z]*)");

    private Durations() {
    }

    /** Returns the milliseconds {@code text} denotes (microseconds round up to whole milliseconds). */
    public static long parseMillis(String text) {
        String s = text.trim().toLowerCase(Locale.ROOT);
        Matcher m = FORM.matcher(s);
        if (!m.matches()) {
            throw new IllegalArgumentException("not a time (expected e.g. 500ms, 30s, 2min)");
        }
        long value;
        try {
            value = Long.parseLong(m.group(1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("time out of range");
        }
        TimeUnit unit;
        switch (m.group(2)) {
            case "us" -> {
                return (value + 999) / 1000;
            }
            case "", "ms" -> unit = TimeUnit.MILLISECONDS;
            case "s" -> unit = TimeUnit.SECONDS;
            case "m", "min" -> unit = TimeUnit.MINUTES;
            case "h" -> unit = TimeUnit.HOURS;
            case "d" -> unit = TimeUnit.DAYS;
            default -> throw new IllegalArgumentException(
                    "unknown time suffix '" + m.group(2) + "' (accepted: us, ms, s, m/min, h, d)");
        }
        long ms = unit.toMillis(value);
        if (ms == Long.MAX_VALUE) {
            throw new IllegalArgumentException("time out of range");
        }
        return ms;
    }

    /** Formats milliseconds in the largest unit that divides them exactly, e.g. {@code 30s}. */
    public static String formatMillis(long ms) {
        if (ms != 0 && ms % 3_600_000 == 0) {
            return ms / 3_600_000 + "h";
        }
        if (ms != 0 && ms % 60_000 == 0) {
            return ms / 60_000 + "min";
        }
        if (ms != 0 && ms % 1000 == 0) {
            return ms / 1000 + "s";
        }
        return ms + "ms";
    }
}
