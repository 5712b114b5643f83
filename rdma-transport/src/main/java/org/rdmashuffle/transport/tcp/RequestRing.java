package org.rdmashuffle.transport.tcp;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.concurrent.CompletableFuture;
import org.rdmashuffle.transport.ReadListener;

/**
 * The requests of one {@link TcpChannel}, in post order: a ring of slots (each request's fields in
 * arrays indexed by {@code sequence & mask}, so posting allocates nothing) and behind it an overflow
 * queue for posts that found the ring full, moved into the ring as replies free slots.
 *
 * <p>Sequences: {@code head} is the oldest request not yet completed, {@code sent} the next to send,
 * {@code tail} the next free slot; {@code head <= sent <= tail}. Adding, advancing {@code head} and the
 * overflow are guarded by the channel's lock; {@code head} and {@code tail} may be read without it.
 * {@code sent}, and a sent slot's fields, belong to the requester thread.
 */
final class RequestRing {
    static final byte KIND_READ = 1;
    static final byte KIND_CONTROL = 2;

    final int mask;
    final byte[] kind;
    final long[] remoteAddress;
    final int[] rkey;
    final int[] length;
    final ByteBuffer[] dst;
    final int[] dstOffset;
    final long[] requestId;
    final ReadListener[] listener;
    final ByteBuffer[] controlPayload;
    final Object[] controlFuture;
    final long[] postNanos;
    /** Requests posted while the ring was full, in post order. */
    private final ArrayDeque<Queued> overflow = new ArrayDeque<>();
    volatile long head;
    volatile long tail;
    /** Requester thread only. */
    long sent;

    /** A request posted while the ring was full. */
    record Queued(byte kind, long remoteAddress, int rkey, int length, ByteBuffer dst, int dstOffset,
                  long requestId, ReadListener listener, ByteBuffer controlPayload,
                  CompletableFuture<ByteBuffer> controlFuture, long postNanos) {
    }

    /** A ring of at least {@code slots} slots (a power of two). */
    RequestRing(int slots) {
        int cap = Integer.highestOneBit(Math.max(2, slots) - 1) << 1;
        mask = cap - 1;
        kind = new byte[cap];
        remoteAddress = new long[cap];
        rkey = new int[cap];
        length = new int[cap];
        dst = new ByteBuffer[cap];
        dstOffset = new int[cap];
        requestId = new long[cap];
        listener = new ReadListener[cap];
        controlPayload = new ByteBuffer[cap];
        controlFuture = new Object[cap];
        postNanos = new long[cap];
    }

    int slot(long sequence) {
        return (int) sequence & mask;
    }

    /** Nothing posted is left: every request completed, none queued behind the ring. Lock held, or an estimate. */
    boolean isIdle() {
        return head == tail && overflow.isEmpty();
    }

    /** Whether a new request must queue behind the ring (it is full, or others already queue). Lock held. */
    private boolean mustQueue() {
        return !overflow.isEmpty() || tail - head > mask;
    }

    /** Adds a READ. Lock held. */
    void addRead(long address, int key, int len, ByteBuffer sink, int sinkOffset, long id, ReadListener l, long now) {
        if (mustQueue()) {
            overflow.add(new Queued(KIND_READ, address, key, len, sink, sinkOffset, id, l, null, null, now));
            return;
        }
        long seq = tail;
        int i = (int) seq & mask;
        kind[i] = KIND_READ;
        remoteAddress[i] = address;
        rkey[i] = key;
        length[i] = len;
        dst[i] = sink;
        dstOffset[i] = sinkOffset;
        requestId[i] = id;
        listener[i] = l;
        postNanos[i] = now;
        tail = seq + 1;
    }

    /** Adds a control message ({@code f} null: a keep-alive). Lock held. */
    void addControl(ByteBuffer payload, CompletableFuture<ByteBuffer> f, long now) {
        if (mustQueue()) {
            overflow.add(new Queued(KIND_CONTROL, 0, 0, 0, null, 0, 0, null, payload, f, now));
            return;
        }
        long seq = tail;
        int i = (int) seq & mask;
        kind[i] = KIND_CONTROL;
        controlPayload[i] = payload;
        controlFuture[i] = f;
        postNanos[i] = now;
        tail = seq + 1;
    }

    /** The oldest request completed: its slot frees, and an overflowed request may take it. Lock held. */
    void advanceHead() {
        head = head + 1;
        if (!overflow.isEmpty()) {
            refillFromOverflow();
        }
    }

    /** Moves overflowed requests into free ring slots. Lock held. */
    private void refillFromOverflow() {
        Queued q;
        while (tail - head <= mask && (q = overflow.poll()) != null) {
            long seq = tail;
            int i = (int) seq & mask;
            kind[i] = q.kind();
            remoteAddress[i] = q.remoteAddress();
            rkey[i] = q.rkey();
            length[i] = q.length();
            dst[i] = q.dst();
            dstOffset[i] = q.dstOffset();
            requestId[i] = q.requestId();
            listener[i] = q.listener();
            controlPayload[i] = q.controlPayload();
            controlFuture[i] = q.controlFuture();
            postNanos[i] = q.postNanos();
            tail = seq + 1;
        }
    }

    /** The oldest overflowed request, taken off the queue; null when none. Lock held. */
    Queued pollOverflow() {
        return overflow.poll();
    }
}
