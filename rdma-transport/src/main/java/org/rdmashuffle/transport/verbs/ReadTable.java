package org.rdmashuffle.transport.verbs;

import org.rdmashuffle.transport.ReadListener;

/**
 * The state of READs a channel holds, as a flyweight table: entry {@code i}'s fields sit at fixed
 * offsets from {@code i * STRIDE} in one {@code long[]}, its listener at {@code i} in an array beside it
 * (a reference cannot live in a long). Nothing is allocated per READ: a READ moves between tables (the
 * queue waiting for credits, the window of outstanding slots) by {@link #copy}, and leaves one by
 * {@link #clear}. Not thread-safe: the owning channel's lock guards it.
 */
final class ReadTable {
    private static final int REMOTE = 0;
    private static final int LOCAL = 1;
    private static final int REQUEST_ID = 2;
    /** When the READ was first posted (nanoTime): a repost keeps it. */
    private static final int POST_NANOS = 3;
    /** The post sequence of an outstanding READ: completions of a queue pair come in that order. */
    private static final int SEQ = 4;
    /** rkey in the high 32 bits, lkey in the low 32. */
    private static final int KEYS = 5;
    /** length in the high 32 bits, reposts in the low 32. */
    private static final int LENGTH_REPOSTS = 6;
    /** 1 while the entry holds a READ (an outstanding slot), 0 when free. */
    private static final int BUSY = 7;
    static final int STRIDE = 8;
    private static final long LOW = 0xFFFF_FFFFL;

    private final long[] fields;
    private final ReadListener[] listeners;

    ReadTable(int capacity) {
        fields = new long[capacity * STRIDE];
        listeners = new ReadListener[capacity];
    }

    int capacity() {
        return listeners.length;
    }

    /** Writes entry {@code i}, not busy, sequence 0. */
    void set(int i, long remote, int rkey, int length, long local, int lkey, long requestId, ReadListener listener,
             long postNanos, int reposts) {
        int o = i * STRIDE;
        fields[o + REMOTE] = remote;
        fields[o + LOCAL] = local;
        fields[o + REQUEST_ID] = requestId;
        fields[o + POST_NANOS] = postNanos;
        fields[o + SEQ] = 0;
        fields[o + KEYS] = ((long) rkey << 32) | (lkey & LOW);
        fields[o + LENGTH_REPOSTS] = ((long) length << 32) | (reposts & LOW);
        fields[o + BUSY] = 0;
        listeners[i] = listener;
    }

    /** Copies entry {@code from} of {@code src} (every field and the listener) into entry {@code to} of this table. */
    void copy(ReadTable src, int from, int to) {
        System.arraycopy(src.fields, from * STRIDE, fields, to * STRIDE, STRIDE);
        listeners[to] = src.listeners[from];
    }

    /** Empties entry {@code i}: not busy, and its listener no longer referenced. */
    void clear(int i) {
        fields[i * STRIDE + BUSY] = 0;
        listeners[i] = null;
    }

    long remote(int i) {
        return fields[i * STRIDE + REMOTE];
    }

    long local(int i) {
        return fields[i * STRIDE + LOCAL];
    }

    long requestId(int i) {
        return fields[i * STRIDE + REQUEST_ID];
    }

    long postNanos(int i) {
        return fields[i * STRIDE + POST_NANOS];
    }

    long seq(int i) {
        return fields[i * STRIDE + SEQ];
    }

    void seq(int i, long seq) {
        fields[i * STRIDE + SEQ] = seq;
    }

    int rkey(int i) {
        return (int) (fields[i * STRIDE + KEYS] >>> 32);
    }

    int lkey(int i) {
        return (int) fields[i * STRIDE + KEYS];
    }

    int length(int i) {
        return (int) (fields[i * STRIDE + LENGTH_REPOSTS] >>> 32);
    }

    int reposts(int i) {
        return (int) fields[i * STRIDE + LENGTH_REPOSTS];
    }

    void reposts(int i, int reposts) {
        int o = i * STRIDE + LENGTH_REPOSTS;
        fields[o] = (fields[o] & ~LOW) | (reposts & LOW);
    }

    boolean busy(int i) {
        return fields[i * STRIDE + BUSY] != 0;
    }

    void busy(int i, boolean busy) {
        fields[i * STRIDE + BUSY] = busy ? 1 : 0;
    }

    ReadListener listener(int i) {
        return listeners[i];
    }

    /** Entry {@code i} as the peer is asked about it: rkey, remote address, length. */
    String describe(int i) {
        return "(rkey 0x" + Integer.toHexString(rkey(i)) + ", address 0x" + Long.toHexString(remote(i)) + ", "
                + length(i) + " bytes)";
    }
}
