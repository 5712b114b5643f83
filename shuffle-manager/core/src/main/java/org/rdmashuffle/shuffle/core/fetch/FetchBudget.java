package org.rdmashuffle.shuffle.core.fetch;

import org.rdmashuffle.pool.BufferPool;

/**
 * The budget of one {@link BlockFetcher}: every READ counts, slot and metadata READs as well as data
 * READs. At most {@code maxReadsInFlightPerPeer} READs to one peer are posted and not yet taken up by
 * the task, and the pool buffers of READs in flight and of blocks not yet closed take at most
 * {@code maxBytesInFlight} bytes of the pool — a buffer is charged what it takes (its size class), not
 * what its READs need, so a 32-byte slot READ costs the smallest buffer. A step larger than either bound
 * goes alone: it waits only while something else is in flight. Task thread only.
 *
 * <p>Buffers are charged when a step takes one and uncharged when it is given back, both through
 * {@link FetchBuffers}; READs are counted here when posted and when taken up.
 */
final class FetchBudget {
    private final BufferPool pool;
    private final long maxBytesInFlight;
    private final int maxReadsInFlightPerPeer;
    private final int readBlockBytes;
    private long bytesInFlight;
    private int readsInFlight;

    FetchBudget(BufferPool pool, long maxBytesInFlight, int maxReadsInFlightPerPeer, int readBlockBytes) {
        this.pool = pool;
        this.maxBytesInFlight = maxBytesInFlight;
        this.maxReadsInFlightPerPeer = maxReadsInFlightPerPeer;
        this.readBlockBytes = readBlockBytes;
    }

    /** Whether {@code reads} more READs to {@code p} must wait: it has some in flight and they would pass the bound. */
    boolean readsWait(FetchPeer p, int reads) {
        return p.readsInFlight > 0 && p.readsInFlight + reads > maxReadsInFlightPerPeer;
    }

    /** Whether a buffer for {@code bytes} must wait: something is charged and it would pass the bound. */
    boolean bytesWait(int bytes) {
        return bytesInFlight > 0 && bytesInFlight + pool.bytesTaken(bytes) > maxBytesInFlight;
    }

    /**
     * Whether a window of {@code size} bytes to {@code p} must wait for the byte or READ bound (asked only
     * for a stream that already holds a window: one window always goes).
     */
    boolean windowWaits(FetchPeer p, int size) {
        return bytesInFlight + pool.bytesTaken(size) > maxBytesInFlight
                || p.readsInFlight + (size + readBlockBytes - 1) / readBlockBytes > maxReadsInFlightPerPeer;
    }

    void charge(long bytes) {
        bytesInFlight += bytes;
    }

    void uncharge(long bytes) {
        bytesInFlight -= bytes;
    }

    /** Counts the READs {@code s} posts. */
    void readsPosted(FetchStep s) {
        s.peer.readsInFlight += s.reads;
        readsInFlight += s.reads;
    }

    /** Uncounts the READs of {@code s}: taken up by the task, or never posted. */
    void readsDone(FetchStep s) {
        s.peer.readsInFlight -= s.reads;
        readsInFlight -= s.reads;
    }

    /** Bytes of the pool taken by buffers of READs in flight and of blocks not yet closed. */
    long bytesInFlight() {
        return bytesInFlight;
    }

    /** READs posted and not yet taken up, to every peer. */
    int readsInFlight() {
        return readsInFlight;
    }
}
