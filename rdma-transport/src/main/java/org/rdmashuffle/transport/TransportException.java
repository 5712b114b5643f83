package org.rdmashuffle.transport;

import java.io.IOException;

/** A transport operation failed; {@link #status()} is a {@link ReadStatus} code where one applies. */
public class TransportException extends IOException {
    private static final long serialVersionUID = 1L;
    private final int status;

    public TransportException(String message) {
        this(message, -1, null);
    }

    public TransportException(String message, Throwable cause) {
        this(message, -1, cause);
    }

    public TransportException(String message, int status, Throwable cause) {
        super(message, cause);
        this.status = status;
    }

    /** The {@link ReadStatus} code, or -1. */
    public int status() {
        return status;
    }
}
