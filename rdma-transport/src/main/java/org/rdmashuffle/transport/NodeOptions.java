package org.rdmashuffle.transport;

import java.util.Objects;

/**
 * What a node needs beyond {@link org.rdmashuffle.conf.RdmaShuffleConf}.
 *
 * @param bindHost address to listen on (e.g. the executor's host)
 * @param advertisedHost host name peers use to reach this node
 * @param controlHandler answers control messages from peers
 * @param secret shared secret for connection set-up, or {@code null} when authentication is off
 */
public record NodeOptions(String bindHost, String advertisedHost, ControlHandler controlHandler, byte[] secret) {
    public NodeOptions {
        Objects.requireNonNull(bindHost, "bindHost");
        Objects.requireNonNull(advertisedHost, "advertisedHost");
        Objects.requireNonNull(controlHandler, "controlHandler");
        if (secret != null && secret.length == 0) {
            throw new IllegalArgumentException("authentication secret is empty");
        }
    }

    /** Loopback, no control messages, no authentication: tests and benchmarks. */
    public static NodeOptions loopback() {
        return new NodeOptions("127.0.0.1", "127.0.0.1", ControlHandler.NONE, null);
    }

    public NodeOptions withControlHandler(ControlHandler handler) {
        return new NodeOptions(bindHost, advertisedHost, handler, secret);
    }

    public NodeOptions withSecret(byte[] newSecret) {
        return new NodeOptions(bindHost, advertisedHost, controlHandler, newSecret);
    }
}
