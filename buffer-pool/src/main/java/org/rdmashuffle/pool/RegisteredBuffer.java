package org.rdmashuffle.pool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;

/**
 * A slice of registered memory handed out by a {@link BufferPool}. Reference counted: it starts at 1
 * when acquired; {@link #retain()} adds a holder, {@link #release()} drops one, and the last release
 * returns the memory to the pool. Releasing more often than acquiring and retaining is an error.
 *
 * <p>Buffer objects are reused across acquires, so a holder must not touch a buffer after its last
 * release. While a transport operation writes into the buffer, the transport owns its contents.
 */
public final class RegisteredBuffer {
    private static final VarHandle REF_CNT;

    static {
        try {
            REF_CNT = MethodHandles.lookup().findVarHandle(RegisteredBuffer.class, "refCnt", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    final BufferPool pool;
    final Chunk chunk;
    final int sizeClass;
    private final int chunkOffset;
    private final int capacity;
    private final ByteBuffer view;
    private final ByteBuffer transportView;
    @SuppressWarnings("unused")
    private volatile int refCnt;
    volatile LeakTracker tracker;

    RegisteredBuffer(BufferPool pool, Chunk chunk, int sizeClass, int chunkOffset, int capacity) {
        this.pool = pool;
        this.chunk = chunk;
        this.sizeClass = sizeClass;
        this.chunkOffset = chunkOffset;
        this.capacity = capacity;
        this.view = chunk.memory.slice(chunkOffset, capacity);
        this.transportView = chunk.memory.slice(chunkOffset, capacity);
    }

    /** Usable bytes: the size class the request was rounded up to. */
    public int capacity() {
        return capacity;
    }

    /**
     * The owner's view of the memory; position 0 and limit {@link #capacity()} at acquire. The same
     * object for the whole life of the buffer, so keeping it across a release is a bug.
     */
    public ByteBuffer byteBuffer() {
        return view;
    }

    /**
     * A second view of the same memory reserved for the transport's I/O thread, so it can move bytes
     * in without disturbing the owner's position and limit. Owners do not use it.
     */
    public ByteBuffer transportView() {
        return transportView;
    }

    /** The registration of the chunk this buffer lies in. */
    public Registration registration() {
        return chunk.registration;
    }

    /** Where this buffer starts inside the memory its {@link #registration()} covers. */
    public int registrationOffset() {
        return chunkOffset;
    }

    /** The current reference count; 0 once released. */
    public int refCnt() {
        return (int) REF_CNT.getVolatile(this);
    }

    void onAcquire() {
        view.clear();
        REF_CNT.setVolatile(this, 1);
    }

    /** Adds a holder. */
    public RegisteredBuffer retain() {
        for (;;) {
            int c = (int) REF_CNT.getVolatile(this);
            if (c <= 0) {
                throw new IllegalStateException("retain of a released buffer (" + capacity + " bytes)");
            }
            if (REF_CNT.compareAndSet(this, c, c + 1)) {
                return this;
            }
        }
    }

    /**
     * Drops a holder; the last one returns the buffer to its pool.
     *
     * @return true when this call returned the buffer
     * @throws IllegalStateException when the buffer was already released
     */
    public boolean release() {
        for (;;) {
            int c = (int) REF_CNT.getVolatile(this);
            if (c <= 0) {
                throw new IllegalStateException("double release of a buffer (" + capacity + " bytes)");
            }
            if (REF_CNT.compareAndSet(this, c, c - 1)) {
                if (c == 1) {
                    pool.recycle(this);
                    return true;
                }
                return false;
            }
        }
    }

    /** Records {@code hint} as the buffer's last user, shown if it leaks (tracked buffers only). */
    public RegisteredBuffer touch(Object hint) {
        LeakTracker t = tracker;
        if (t != null) {
            t.hint = hint;
        }
        return this;
    }

    @Override
    public String toString() {
        return "RegisteredBuffer[" + capacity + " bytes, refCnt=" + refCnt() + "]";
    }
}
