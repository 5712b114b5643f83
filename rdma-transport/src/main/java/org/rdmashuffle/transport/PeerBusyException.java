package org.rdmashuffle.transport;

/**
 * A peer refused a connection at its handshake because it serves as many connections as its limits allow
 * (its {@code maxConnections}, a source address's or a realm's share): nothing is wrong with either side, and
 * a later attempt may get in. Thrown by {@link RdmaNode#connect} once its retries are spent.
 */
public class PeerBusyException extends TransportException {
    private static final long serialVersionUID = 1L;

    public PeerBusyException(String message) {
        super(message);
    }

    public PeerBusyException(String message, Throwable cause) {
        super(message, ReadStatus.CONNECTION_LOST, cause);
    }
}
