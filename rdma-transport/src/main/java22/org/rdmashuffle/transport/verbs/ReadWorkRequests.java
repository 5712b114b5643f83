package org.rdmashuffle.transport.verbs;

import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;

/**
 * A queue pair's list of READ work requests ({@code struct ibv_send_wr}, one {@code struct ibv_sge}
 * each), allocated off-heap once and linked once. {@link #post} rewrites the first {@code k}, ends the
 * list after them (ids, addresses, keys, lengths and whether each is signaled) and calls the provider's
 * {@code post_send} as {@code ibv_post_send} does. Nothing is
 * allocated per READ. Not thread-safe: its queue pair serialises posts.
 */
final class ReadWorkRequests implements AutoCloseable {
    private final RdmaCore core;
    private final MethodHandle postSendHandle;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment wrs;
    private final MemorySegment sges;
    private final MemorySegment badWr;
    private final MemorySegment qp;
    private final MemorySegment postSend;
    private final int capacity;

    /**
     * @param qp       the {@code struct ibv_qp} posted to
     * @param postSend its context's {@code ops.post_send}
     * @param capacity the most READs one post takes (the send queue's depth)
     */
    ReadWorkRequests(RdmaCore core, MemorySegment qp, MemorySegment postSend, int capacity) {
        this(core, core.postSend, qp, postSend, capacity);
    }

    /** With {@code postSendHandle} as the downcall (tests: one that allows an upcall as the driver). */
    ReadWorkRequests(RdmaCore core, MethodHandle postSendHandle, MemorySegment qp, MemorySegment postSend,
                     int capacity) {
        if (capacity < 1) {
            throw new IllegalArgumentException("capacity " + capacity);
        }
        this.core = core;
        this.postSendHandle = postSendHandle;
        this.qp = qp;
        this.postSend = postSend;
        this.capacity = capacity;
        wrs = arena.allocate(RdmaCore.WR_SIZE * capacity, 8);
        sges = arena.allocate(RdmaCore.SGE_SIZE * capacity, 8);
        badWr = arena.allocate(8, 8);
        for (int j = 0; j < capacity; j++) {
            long w = j * RdmaCore.WR_SIZE;
            wrs.set(JAVA_LONG, w + RdmaCore.WR_NEXT, j + 1 < capacity ? wrs.address() + (j + 1) * RdmaCore.WR_SIZE : 0L);
            wrs.set(JAVA_LONG, w + RdmaCore.WR_SG_LIST, sges.address() + j * RdmaCore.SGE_SIZE);
            wrs.set(JAVA_INT, w + RdmaCore.WR_NUM_SGE, 1);
            wrs.set(JAVA_INT, w + RdmaCore.WR_OPCODE, RdmaCore.IBV_WR_RDMA_READ);
            wrs.set(JAVA_INT, w + RdmaCore.WR_SEND_FLAGS, RdmaCore.IBV_SEND_SIGNALED);
        }
    }

    int capacity() {
        return capacity;
    }

    /** The first work request: what post_send is given. */
    MemorySegment list() {
        return wrs;
    }

    /**
     * Posts the first {@code k} READs of {@code chain}.
     *
     * @throws IOException when post_send refused the list (its errno named)
     */
    void post(ReadChain chain, int k) throws IOException {
        if (k < 1 || k > capacity) {
            throw new IOException(k + " READs in one post; the send queue holds " + capacity);
        }
        MemorySegment w = wrs;
        MemorySegment s = sges;
        for (int j = 0; j < k; j++) {
            long b = j * RdmaCore.WR_SIZE;
            w.set(JAVA_LONG, b + RdmaCore.WR_WR_ID, chain.wrId[j]); // the queue pair's tag and the slot (WorkRequestIds)
            w.set(JAVA_LONG, b + RdmaCore.WR_RDMA_REMOTE_ADDR, chain.remote[j]);
            w.set(JAVA_INT, b + RdmaCore.WR_RDMA_RKEY, chain.rkey[j]);
            w.set(JAVA_INT, b + RdmaCore.WR_SEND_FLAGS, chain.signaled[j] ? RdmaCore.IBV_SEND_SIGNALED : 0);
            long g = j * RdmaCore.SGE_SIZE;
            s.set(JAVA_LONG, g + RdmaCore.SGE_ADDR, chain.local[j]);
            s.set(JAVA_INT, g + RdmaCore.SGE_LENGTH, chain.length[j]);
            s.set(JAVA_INT, g + RdmaCore.SGE_LKEY, chain.lkey[j]);
        }
        long last = (k - 1) * RdmaCore.WR_SIZE;
        w.set(JAVA_LONG, last + RdmaCore.WR_NEXT, 0L);
        int rc;
        try {
            rc = (int) postSendHandle.invokeExact(postSend, qp, w, badWr);
        } catch (Throwable t) {
            throw new IOException("post_send: " + t, t);
        } finally {
            if (k < capacity) {
                w.set(JAVA_LONG, last + RdmaCore.WR_NEXT, w.address() + k * RdmaCore.WR_SIZE);
            }
        }
        if (rc != 0) {
            throw new IOException("ibv_post_send: " + core.describe(rc));
        }
    }

    @Override
    public void close() {
        arena.close();
    }
}
