package org.rdmashuffle.transport;

/**
 * A peer refused a connection at its handshake, or answered it as no rdma-shuffle node does: retrying at once will
 * not help. {@link #reason()} says why, so that a caller decides by it rather than by the message's words; busy is
 * not a refusal ({@link PeerBusyException}). Thrown by {@link RdmaNode#connect}.
 */
public class HandshakeRefusedException extends TransportException {
    private static final long serialVersionUID = 1L;

    /** Why the handshake was refused; {@link #mayChange()} tells what may be different later in a job's life. */
    public enum Reason {
        /** The peer does not speak this node's protocol version (or refuses a realm for its version). */
        BAD_VERSION(false),
        /** One side has authentication on, the other off. */
        AUTH_MISMATCH(false),
        /** The proof did not verify: a different secret, or (per realm) a realm the peer does not know (yet). */
        AUTH_FAILED(true),
        /** The peer keeps a secret per realm, and this node named none. */
        REALM_REQUIRED(false),
        /** The peer keeps no secrets per realm, and this node named one. */
        REALM_UNSUPPORTED(false),
        /** The connection reached the peer at another address than the one dialled (a relay, port forward, NAT). */
        OTHER_ADDRESS(false),
        /** Something else answers on the peer's port (another protocol). */
        NOT_RDMA_SHUFFLE(false),
        /** The peer accepted, but could not prove it holds the secret (a peer that restarted with another one). */
        PEER_UNPROVEN(true),
        /** A status this node does not know (a newer peer). */
        UNKNOWN(true);

        private final boolean mayChange;

        Reason(boolean mayChange) {
            this.mayChange = mayChange;
        }

        /** Whether a later attempt may be answered otherwise while the same job runs (e.g. a restarted peer). */
        public boolean mayChange() {
            return mayChange;
        }
    }

    private final Reason reason;

    public HandshakeRefusedException(String message, Reason reason, Throwable cause) {
        super(message, cause);
        this.reason = reason;
    }

    public Reason reason() {
        return reason;
    }

    /** {@link Reason#mayChange()} of {@link #reason()}. */
    public boolean mayChange() {
        return reason.mayChange();
    }
}
