package org.rdmashuffle.conf;

import java.util.ArrayList;
import java.util.List;

/**
 * How many buffers of which sizes the pool registers up front, written {@code size:count,...}, e.g.
 * {@code 64k:256,1m:32}. Empty means none.
 *
 * @param entries the (size, count) pairs in the order given
 */
public record PreallocationSpec(List<Entry> entries) {
    /** One size class and how many of its buffers to pre-allocate. */
    public record Entry(long sizeBytes, int count) {
    }

    public PreallocationSpec {
        entries = List.copyOf(entries);
    }

    /** Total bytes the spec asks for. */
    public long totalBytes() {
        long total = 0;
        for (Entry e : entries) {
            total += e.sizeBytes() * e.count();
        }
        return total;
    }

    /** Parses {@code size:count,...}; throws {@link IllegalArgumentException} with the reason. */
    public static PreallocationSpec parse(String raw) {
        List<Entry> out = new ArrayList<>();
        String s = raw.trim();
        if (s.isEmpty()) {
            return new PreallocationSpec(out);
        }
        for (String part : s.split(",")) {
            String[] kv = part.trim().split(":");
            if (kv.length != 2) {
                throw new IllegalArgumentException("entry '" + part.trim() + "' is not size:count");
            }
            long size;
            try {
                size = ByteSizes.parse(kv[0]);
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("entry '" + part.trim() + "': " + e.getMessage());
            }
            if (Long.bitCount(size) != 1) {
                throw new IllegalArgumentException("entry '" + part.trim() + "': size is not a power of two");
            }
            int count;
            try {
                count = Integer.parseInt(kv[1].trim());
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("entry '" + part.trim() + "': count is not an integer");
            }
            if (count < 1) {
                throw new IllegalArgumentException("entry '" + part.trim() + "': count must be at least 1");
            }
            out.add(new Entry(size, count));
        }
        return new PreallocationSpec(out);
    }

    @Override
    public String toString() {
        StringBuilder b = new StringBuilder();
        for (Entry e : entries) {
            if (b.length() > 0) {
                b.append(',');
            }
            b.append(ByteSizes.format(e.sizeBytes())).append(':').append(e.count());
        }
        return b.toString();
    }
}
