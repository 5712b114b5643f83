package org.rdmashuffle.pool;

/** An acquire the pool could not satisfy: at its cap past the timeout, registration failure, or closed. */
public final class BufferPoolException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public BufferPoolException(String message) {
        super(message);
    }

    public BufferPoolException(String message, Throwable cause) {
        super(message, cause);
    }
}
