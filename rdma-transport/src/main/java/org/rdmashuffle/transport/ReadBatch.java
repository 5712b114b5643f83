package org.rdmashuffle.transport;

import java.util.Objects;
import org.rdmashuffle.pool.RegisteredBuffer;

/**
 * A reusable list of one-sided READs to post together. Each entry reads {@code length} bytes at
 * {@code remoteAddress} of the peer region named by {@code rkey} into a local registered destination
 * at an offset. {@link RdmaChannel#post} copies the entries, so the batch may be cleared and refilled
 * as soon as it returns. Not thread-safe. Adding allocates nothing once the batch has grown to its
 * largest size.
 */
public final class ReadBatch {
    private long[] remoteAddress;
    private int[] rkey;
    private int[] length;
    private RegisteredBuffer[] dstBuffer;
    private MemoryRegion[] dstRegion;
    private int[] dstOffset;
    private long[] requestId;
    private int size;

    public ReadBatch(int initialCapacity) {
        int c = Math.max(1, initialCapacity);
        remoteAddress = new long[c];
        rkey = new int[c];
        length = new int[c];
        dstBuffer = new RegisteredBuffer[c];
        dstRegion = new MemoryRegion[c];
        dstOffset = new int[c];
        requestId = new long[c];
    }

    /** Adds a READ into a pooled buffer; {@code dstOffset + length} must fit in the buffer. */
    public ReadBatch add(long remoteAddress, int rkey, int length, RegisteredBuffer dst, int dstOffset,
                         long requestId) {
        Objects.requireNonNull(dst, "dst");
        checkDst(length, dstOffset, dst.capacity());
        int i = next();
        fill(i, remoteAddress, rkey, length, dstOffset, requestId);
        dstBuffer[i] = dst;
        return this;
    }

    /** Adds a READ into a region registered with {@link RegionAccess#READ_SINK} on the local node. */
    public ReadBatch add(long remoteAddress, int rkey, int length, MemoryRegion dst, int dstOffset, long requestId) {
        Objects.requireNonNull(dst, "dst");
        if (dst.access() != RegionAccess.READ_SINK) {
            throw new IllegalArgumentException("READ destination must be registered as READ_SINK");
        }
        checkDst(length, dstOffset, dst.length());
        int i = next();
        fill(i, remoteAddress, rkey, length, dstOffset, requestId);
        dstRegion[i] = dst;
        return this;
    }

    private static void checkDst(int length, int dstOffset, int capacity) {
        if (dstOffset < 0 || length < 0 || length > capacity - dstOffset) {
            throw new IndexOutOfBoundsException("READ of " + length + " bytes at offset " + dstOffset
                    + " does not fit a destination of " + capacity + " bytes");
        }
    }

    private void fill(int i, long addr, int key, int len, int off, long id) {
        remoteAddress[i] = addr;
        rkey[i] = key;
        length[i] = len;
        dstOffset[i] = off;
        requestId[i] = id;
        dstBuffer[i] = null;
        dstRegion[i] = null;
    }

    private int next() {
        if (size == remoteAddress.length) {
            int c = size * 2;
            remoteAddress = java.util.Arrays.copyOf(remoteAddress, c);
            rkey = java.util.Arrays.copyOf(rkey, c);
            length = java.util.Arrays.copyOf(length, c);
            dstBuffer = java.util.Arrays.copyOf(dstBuffer, c);
            dstRegion = java.util.Arrays.copyOf(dstRegion, c);
            dstOffset = java.util.Arrays.copyOf(dstOffset, c);
            requestId = java.util.Arrays.copyOf(requestId, c);
        }
        return size++;
    }

    public int size() {
        return size;
    }

    public boolean isEmpty() {
        return size == 0;
    }

    /** Empties the batch (drops its references to destinations). */
    public void clear() {
        for (int i = 0; i < size; i++) {
            dstBuffer[i] = null;
            dstRegion[i] = null;
        }
        size = 0;
    }

    public long remoteAddress(int i) {
        return remoteAddress[i];
    }

    public int rkey(int i) {
        return rkey[i];
    }

    public int length(int i) {
        return length[i];
    }

    /** The pooled destination of entry {@code i}, or {@code null} when it is a region. */
    public RegisteredBuffer dstBuffer(int i) {
        return dstBuffer[i];
    }

    /** The region destination of entry {@code i}, or {@code null} when it is a pooled buffer. */
    public MemoryRegion dstRegion(int i) {
        return dstRegion[i];
    }

    public int dstOffset(int i) {
        return dstOffset[i];
    }

    public long requestId(int i) {
        return requestId[i];
    }
}
