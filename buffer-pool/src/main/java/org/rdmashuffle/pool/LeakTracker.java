package org.rdmashuffle.pool;

import java.lang.ref.PhantomReference;
import java.lang.ref.ReferenceQueue;

/**
 * Follows one in-use buffer; enqueued by the garbage collector if the buffer is dropped unreleased.
 * Holds what is needed to take the buffer's memory back, never the buffer itself.
 */
final class LeakTracker extends PhantomReference<RegisteredBuffer> {
    final Chunk chunk;
    final int sizeClass;
    final int chunkOffset;
    final int capacity;
    final Throwable acquiredAt;
    volatile Object hint;

    LeakTracker(RegisteredBuffer b, ReferenceQueue<RegisteredBuffer> q, Throwable acquiredAt) {
        super(b, q);
        this.chunk = b.chunk;
        this.sizeClass = b.sizeClass;
        this.chunkOffset = b.registrationOffset();
        this.capacity = b.capacity();
        this.acquiredAt = acquiredAt;
    }
}
