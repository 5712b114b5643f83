package org.rdmashuffle.pool;

import java.nio.ByteBuffer;

/**
 * A block of direct memory registered once through the {@link Registrar}: it serves one size class
 * ({@code sizeClass >= 0}, cut into buffers of that size) or is one buffer above the largest class
 * ({@code sizeClass < 0}). Its mutable fields are guarded by the pool lock.
 */
final class Chunk {
    final ByteBuffer memory;
    final Registration registration;
    final int sizeClass;
    /** Buffers of this chunk outside the shared free list (in use or in a thread cache). */
    int outstanding;
    boolean deregistered;

    Chunk(ByteBuffer memory, Registration registration, int sizeClass) {
        this.memory = memory;
        this.registration = registration;
        this.sizeClass = sizeClass;
    }
}
