package org.rdmashuffle.pool;

/** An acquire the pool could not satisfy: at its cap past the timeout, registration failure, or closed. */
public final class BufferPoolException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final boolean memoryUnavailable;

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
        super(message, cause);
        this.memoryUnavailable = memoryUnavailable;
    }

    /** Whether allocating or registering new memory failed (see the constructor). */
    public boolean memoryUnavailable() {
        return memoryUnavailable;
    }
}
