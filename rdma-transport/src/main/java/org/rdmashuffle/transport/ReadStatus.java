package org.rdmashuffle.transport;

/**
 * Completion statuses. Codes below 64 come from the serving peer (and are on the wire); codes from 64
 * are decided locally.
 */
public final class ReadStatus {
    public static final int SUCCESS = 0;
    /** The rkey names no live region (never registered, or deregistered). */
    public static final int UNKNOWN_KEY = 1;
    /** The range lies (partly) outside the region. */
    public static final int OUT_OF_BOUNDS = 2;
    /** Zero (or negative) length. */
    public static final int INVALID_LENGTH = 3;
    /** The region exists but may not be read remotely. */
    public static final int ACCESS_DENIED = 4;
    /** The peer could not parse the request; it closes the connection. */
    public static final int MALFORMED_REQUEST = 5;
    /** The peer's control handler failed. */
    public static final int HANDLER_FAILED = 6;
    /** The connection was lost (peer closed, reset, I/O error) before the reply arrived. */
    public static final int CONNECTION_LOST = 64;
    /** No reply within the request timeout. */
    public static final int TIMEOUT = 65;
    /** The channel or node was closed locally. */
    public static final int CHANNEL_CLOSED = 66;
    /** The peer's reply did not follow the protocol. */
    public static final int PROTOCOL_ERROR = 67;
    /**
     * The channel closed without serving this: it closed itself after going unused for the idle timeout
     * (nothing was outstanding), or its peer closed the connection in order with no reply under way (to
     * make room for a newcomer while the channel was silent, or closing its node), so no request that
     * completes with this was served. A holder that posts to the channel later gets this too: connect
     * again and post again (a peer that is gone then fails the connect).
     */
    public static final int IDLE_CLOSED = 68;

    private ReadStatus() {
    }

    /** A readable name for {@code status}. */
    public static String describe(int status) {
        return switch (status) {
            case SUCCESS -> "success";
            case UNKNOWN_KEY -> "unknown or stale rkey";
            case OUT_OF_BOUNDS -> "range outside the region";
            case INVALID_LENGTH -> "invalid length";
            case ACCESS_DENIED -> "region not remotely readable";
            case MALFORMED_REQUEST -> "malformed request";
            case HANDLER_FAILED -> "peer's control handler failed";
            case CONNECTION_LOST -> "connection lost";
            case TIMEOUT -> "request timed out";
            case CHANNEL_CLOSED -> "channel closed";
            case PROTOCOL_ERROR -> "protocol error in the peer's reply";
            case IDLE_CLOSED -> "channel closed after going unused (connect again)";
            default -> "status " + status;
        };
    }
}
