package org.rdmashuffle.mapreduce.jobs;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * The rows TeraGen writes, TeraSort orders and TeraValidate checks: {@value #ROW_BYTES} bytes each, a
 * {@value #KEY_BYTES}-byte key followed by a {@value #VALUE_BYTES}-byte value, both a pure function of a seed and
 * the row number, so any row can be made again anywhere (a map task, or the test itself).
 *
 * <p>The key is ten bytes of a 64-bit mix of (seed, row): uniformly spread, so a range partitioner over its
 * first two bytes balances reducers. The value starts with the row number as 16 hex digits (a row is traceable
 * in a dump) and is filled with capital letters drawn from the same mix, then ends in "\r\n".
 *
 * <p>{@link #hash} gives each row a 64-bit fingerprint; the checksum of a set of rows is the sum of the
 * fingerprints modulo 2^64, which does not depend on the order of the rows or on how they are split into files.
 */
public final class TeraRows {
    public static final int KEY_BYTES = 10;
    public static final int VALUE_BYTES = 90;
    public static final int ROW_BYTES = KEY_BYTES + VALUE_BYTES;

    private static final long GOLDEN_GAMMA = 0x9E3779B97F4A7C15L;
    private static final byte[] HEX = "0123456789abcdef".getBytes(StandardCharsets.US_ASCII);

    private TeraRows() {
    }

    /** Writes row {@code rowNumber} of the data set {@code seed} into {@code row[0..ROW_BYTES)}. */
    public static void generate(long seed, long rowNumber, byte[] row) {
        long state = mix64(seed * GOLDEN_GAMMA + mix64(rowNumber + GOLDEN_GAMMA));
        long keyHigh = mix64(state);
        long keyLow = mix64(keyHigh ^ state);
        for (int i = 0; i < 8; i++) {
            row[i] = (byte) (keyHigh >>> (56 - 8 * i));
        }
        row[8] = (byte) (keyLow >>> 56);
        row[9] = (byte) (keyLow >>> 48);

        for (int i = 0; i < 16; i++) {
            row[KEY_BYTES + i] = HEX[(int) (rowNumber >>> (60 - 4 * i)) & 0xF];
        }
        long filler = keyLow;
        for (int i = KEY_BYTES + 16; i < ROW_BYTES - 2; i++) {
            filler = mix64(filler + GOLDEN_GAMMA);
            row[i] = (byte) ('A' + Long.remainderUnsigned(filler, 26));
        }
        row[ROW_BYTES - 2] = '\r';
        row[ROW_BYTES - 1] = '\n';
    }

    /** A 64-bit fingerprint of {@code length} bytes: FNV-1a over the bytes, then a final avalanche. */
    public static long hash(byte[] bytes, int offset, int length) {
        long h = 0xCBF29CE484222325L;
        for (int i = offset; i < offset + length; i++) {
            h ^= bytes[i] & 0xFF;
            h *= 0x100000001B3L;
        }
        return mix64(h);
    }

    /** The fingerprint of a row whose key and value are held apart (as a map or reduce task sees them). */
    public static long hash(byte[] key, int keyLength, byte[] value, int valueLength) {
        long h = 0xCBF29CE484222325L;
        for (int i = 0; i < keyLength; i++) {
            h ^= key[i] & 0xFF;
            h *= 0x100000001B3L;
        }
        for (int i = 0; i < valueLength; i++) {
            h ^= value[i] & 0xFF;
            h *= 0x100000001B3L;
        }
        return mix64(h);
    }

    /** Rows {@code [0, rows)} of data set {@code seed}: count and checksum, computed here without Hadoop. */
    public static Checksum expected(long seed, long rows) {
        byte[] row = new byte[ROW_BYTES];
        long sum = 0;
        for (long r = 0; r < rows; r++) {
            generate(seed, r, row);
            sum += hash(row, 0, ROW_BYTES);
        }
        return new Checksum(rows, sum);
    }

    /** Compares two keys as unsigned bytes, the order BytesWritable's raw comparator sorts by. */
    public static int compareKeys(byte[] a, int aLength, byte[] b, int bLength) {
        return Arrays.compareUnsigned(a, 0, aLength, b, 0, bLength);
    }

    /** SplitMix64's finaliser (Stafford's variant 13). */
    static long mix64(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** A row count and the order-independent checksum (sum of {@link #hash} modulo 2^64) of those rows. */
    public record Checksum(long rows, long sum) {
        @Override
        public String toString() {
            return rows + " rows, checksum " + Long.toHexString(sum);
        }
    }

    /**
     * Writes rows 0 to {@code rows} - 1 of {@code seed} into {@code files} files under {@code dir}
     * ({@code part-m-00000}, …), consecutive rows per file: one map's input each.
     */
    public static void writeFiles(org.apache.hadoop.fs.Path dir, long rows, int files, long seed)
            throws java.io.IOException {
        org.apache.hadoop.fs.FileSystem fs = org.apache.hadoop.fs.FileSystem.getLocal(
                new org.apache.hadoop.conf.Configuration());
        byte[] row = new byte[ROW_BYTES];
        long per = rows / files;
        for (int f = 0; f < files; f++) {
            try (var out = fs.create(new org.apache.hadoop.fs.Path(dir, String.format("part-m-%05d", f)), false)) {
                for (long r = f * per; r < (f + 1) * per; r++) {
                    generate(seed, r, row);
                    out.write(row);
                }
            }
        }
    }
}
