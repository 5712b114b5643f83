package org.rdmashuffle.conf;

import java.util.Arrays;
import java.util.Locale;
import java.util.Objects;
import java.util.function.Function;
import java.util.stream.Collectors;

/**
 * One declared configuration key: its name, type, default, unit, documentation and the check a
 * value must pass. Instances are immutable; {@link #parse(String)} either returns the typed value or
 * throws an {@link IllegalArgumentException} whose message says what is accepted.
 *
 * @param <T> the type of the parsed value
 */
public final class ConfigKey<T> {
    private final String name;
    private final String type;
    private final String defaultValue;
    private final String unit;
    private final String accepted;
    private final String doc;
    private final Function<String, T> parser;

    private ConfigKey(String name, String type, String defaultValue, String unit, String accepted,
                      String doc, Function<String, T> parser) {
        this.name = Objects.requireNonNull(name);
        this.type = type;
        this.defaultValue = defaultValue;
        this.unit = unit;
        this.accepted = accepted;
        this.doc = doc;
        this.parser = parser;
        // A default that fails its own check is a programming error: catch it at class load.
        parse(defaultValue);
    }

    public String name() {
        return name;
    }

    public String type() {
        return type;
    }

    public String defaultValue() {
        return defaultValue;
    }

    /** The unit of a bare number, or {@code ""} when the type has none. */
    public String unit() {
        return unit;
    }

    /** What values are accepted, in words. */
    public String accepted() {
        return accepted;
    }

    public String doc() {
        return doc;
    }

    /** Parses {@code raw}; throws {@link IllegalArgumentException} naming the reason when it is not accepted. */
    public T parse(String raw) {
        return parser.apply(raw);
    }

    @Override
    public String toString() {
        return name;
    }

    /** A byte size in Spark's notation, within {@code [min, max]} bytes. */
    public static ConfigKey<Long> bytes(String name, String dflt, long min, long max, boolean powerOfTwo,
                                        String doc) {
        String accepted = "a size from " + ByteSizes.format(min) + " to " + ByteSizes.format(max)
                + (powerOfTwo ? ", a power of two" : "") + " (e.g. 64k, 48m, 1g)";
        return new ConfigKey<>(name, "size", dflt, "bytes", accepted, doc, raw -> {
            long v = ByteSizes.parse(raw);
            if (v < min || v > max) {
                throw new IllegalArgumentException("out of range");
            }
            if (powerOfTwo && Long.bitCount(v) != 1) {
                throw new IllegalArgumentException("not a power of two");
            }
            return v;
        });
    }

    /** A time in Spark's notation, within {@code [minMs, maxMs]} milliseconds. */
    public static ConfigKey<Long> millis(String name, String dflt, long minMs, long maxMs, String doc) {
        String accepted = "a time from " + Durations.formatMillis(minMs) + " to " + Durations.formatMillis(maxMs)
                + " (e.g. 500ms, 30s, 2min)";
        return new ConfigKey<>(name, "time", dflt, "ms", accepted, doc, raw -> {
            long v = Durations.parseMillis(raw);
            if (v < minMs || v > maxMs) {
                throw new IllegalArgumentException("out of range");
            }
            return v;
        });
    }

    /** 0 (the feature is off) or a duration within {@code [minMs, maxMs]}. */
    public static ConfigKey<Long> millisOrOff(String name, String dflt, long minMs, long maxMs, String doc) {
        String accepted = "0 (off) or a time from " + Durations.formatMillis(minMs) + " to "
                + Durations.formatMillis(maxMs) + " (e.g. 30s, 2min)";
        return new ConfigKey<>(name, "time", dflt, "ms", accepted, doc, raw -> {
            long v = Durations.parseMillis(raw);
            if (v != 0 && (v < minMs || v > maxMs)) {
                throw new IllegalArgumentException("out of range");
            }
            return v;
        });
    }

    /** A whole number within {@code [min, max]}. */
    public static ConfigKey<Integer> integer(String name, int dflt, int min, int max, String doc) {
        String accepted = "an integer from " + min + " to " + max;
        return new ConfigKey<>(name, "int", Integer.toString(dflt), "", accepted, doc, raw -> {
            int v;
            try {
                v = Integer.parseInt(raw.trim());
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("not an integer");
            }
            if (v < min || v > max) {
                throw new IllegalArgumentException("out of range");
            }
            return v;
        });
    }

    /** One of an enum's constants, named in lower case (matched case-insensitively). */
    public static <E extends Enum<E>> ConfigKey<E> oneOf(String name, Class<E> type, E dflt, String doc) {
        String choices = Arrays.stream(type.getEnumConstants())
                .map(e -> e.name().toLowerCase(Locale.ROOT)).collect(Collectors.joining("|"));
        return new ConfigKey<>(name, "enum", dflt.name().toLowerCase(Locale.ROOT), "", "one of " + choices, doc,
                raw -> {
                    try {
                        return Enum.valueOf(type, raw.trim().toUpperCase(Locale.ROOT));
                    } catch (IllegalArgumentException e) {
                        throw new IllegalArgumentException("not one of " + choices);
                    }
                });
    }

    /** {@code true} or {@code false} (case-insensitive). */
    public static ConfigKey<Boolean> bool(String name, boolean dflt, String doc) {
        return new ConfigKey<>(name, "boolean", Boolean.toString(dflt), "", "true|false", doc, raw -> {
            String v = raw.trim().toLowerCase(Locale.ROOT);
            if (!v.equals("true") && !v.equals("false")) {
                throw new IllegalArgumentException("not a boolean");
            }
            return Boolean.valueOf(v);
        });
    }

    /** A free-form value with its own parser. */
    public static <T> ConfigKey<T> custom(String name, String type, String dflt, String accepted, String doc,
                                          Function<String, T> parser) {
        return new ConfigKey<>(name, type, dflt, "", accepted, doc, parser);
    }
}
