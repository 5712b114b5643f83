package org.rdmashuffle.transport.doctor;

/**
 * Just enough JSON for {@code doctor --json}: objects, arrays, strings, numbers and booleans, written in order
 * into one line. Commas are placed by the writer; the caller only opens, names and closes. Not thread-safe.
 */
final class JsonWriter {
    private final StringBuilder out = new StringBuilder();
    /** Whether the current object or array already holds a value (so the next one needs a comma). */
    private long filled;
    private int depth;
    private boolean afterName;

    JsonWriter beginObject() {
        value();
        out.append('{');
        push();
        return this;
    }

    JsonWriter endObject() {
        pop();
        out.append('}');
        return this;
    }

    JsonWriter beginArray() {
        value();
        out.append('[');
        push();
        return this;
    }

    JsonWriter endArray() {
        pop();
        out.append(']');
        return this;
    }

    JsonWriter name(String name) {
        value();
        string(name);
        out.append(':');
        afterName = true;
        return this;
    }

    JsonWriter value(String s) {
        value();
        if (s == null) {
            out.append("null");
        } else {
            string(s);
        }
        return this;
    }

    JsonWriter value(long n) {
        value();
        out.append(n);
        return this;
    }

    /** A finite number; NaN and infinities (which JSON lacks) are written as null. */
    JsonWriter value(double n) {
        value();
        if (Double.isFinite(n)) {
            out.append(n);
        } else {
            out.append("null");
        }
        return this;
    }

    JsonWriter value(boolean b) {
        value();
        out.append(b);
        return this;
    }

    /** A name and its string value. */
    JsonWriter field(String name, String value) {
        return name(name).value(value);
    }

    @Override
    public String toString() {
        return out.toString();
    }

    private void value() {
        if (afterName) {
            afterName = false;
            return;
        }
        if (depth > 0 && (filled & (1L << depth)) != 0) {
            out.append(',');
        }
        filled |= 1L << depth;
    }

    private void push() {
        if (++depth >= 63) {
            throw new IllegalStateException("JSON nested too deep");
        }
        filled &= ~(1L << depth);
    }

    private void pop() {
        if (depth == 0) {
            throw new IllegalStateException("nothing to close");
        }
        depth--;
    }

    private void string(String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }
}
