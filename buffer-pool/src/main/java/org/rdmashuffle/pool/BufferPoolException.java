package org.rdmashuffle.pool;

/** An acquire the pool could not satisfy: at its cap past the timeout, registration failure, interrupted, or closed. */
public final class BufferPoolException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final boolean memoryUnavailable;
    private final boolean exhausted;

    public BufferPoolException(String message) {
        this(message, null, false);
    }

    public BufferPoolException(String message, Throwable cause) {
        this(message, cause, false);
    }

    /**
     * @param memoryUnavailable the host would not give the pool more memory — direct memory could not
     *     be allocated or registered (locked-memory or mapping limits, a device's limits) — as opposed to
     *     a pool at its own cap, interrupted or closed
     */
    public BufferPoolException(String message, Throwable cause, boolean memoryUnavailable) {
        this(message, cause, memoryUnavailable, false);
    }

    private BufferPoolException(String message, Throwable cause, boolean memoryUnavailable, boolean exhausted) {
        super(message, cause);
        this.memoryUnavailable = memoryUnavailable;
        this.exhausted = exhausted;
    }

    /** The pool is at its own cap, every buffer in use, and none came back within the acquire timeout. */
    public static BufferPoolException exhausted(String message) {
        return new BufferPoolException(message, null, false, true);
    }

    /** Whether allocating or registering new memory failed (see the constructor). */
    public boolean memoryUnavailable() {
        return memoryUnavailable;
    }

    /** Whether the pool was at its own cap past the acquire timeout ({@link #exhausted(String)}). */
    public boolean exhausted() {
        return exhausted;
    }
}
