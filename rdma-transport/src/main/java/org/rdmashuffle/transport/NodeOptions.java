package org.rdmashuffle.transport;

import java.util.Objects;

/**
 * What a node needs beyond {@link org.rdmashuffle.conf.RdmaShuffleConf}.
 *
 * <p>Authentication comes in two shapes. One secret per node ({@code secret} alone, Spark's
 * {@code spark.authenticate}): every peer holds the same secret. A secret per realm ({@code secrets}, for a
 * server that serves many jobs, each with its own secret, such as a Hadoop NodeManager): every connection
 * accepted names a realm and proves it holds that realm's secret, and READs only regions registered for
 * that realm. The outgoing side of either is {@code secret}, with {@code realm} when the peer serves realms.
 * Realms are served by the tcp provider, and by the verbs provider through java.lang.foreign (docs/verbs.md).
 *
 * @param bindHost address to listen on (e.g. the executor's host)
 * @param advertisedHost host name peers use to reach this node
 * @param controlHandler answers control messages from peers
 * @param secret the secret this node proves for its outgoing connections (its realm's, when it has a
 *        {@code realm}), and with {@code secrets} null also the one every accepted connection must prove;
 *        {@code null} when authentication is off
 * @param realm the realm this node's outgoing connections name (e.g. a job id), or {@code null} for none;
 *        needs {@code secret}
 * @param secrets the secret of each realm accepted connections may name, or {@code null} for one secret
 *        per node; when set, a connection that names no realm, or a realm it does not know, is refused
 */
public record NodeOptions(String bindHost, String advertisedHost, ControlHandler controlHandler, byte[] secret,
                          String realm, SecretResolver secrets) {
    public NodeOptions {
        Objects.requireNonNull(bindHost, "bindHost");
        Objects.requireNonNull(advertisedHost, "advertisedHost");
        Objects.requireNonNull(controlHandler, "controlHandler");
        if (secret != null && secret.length == 0) {
            throw new IllegalArgumentException("authentication secret is empty");
        }
        if (realm != null) {
            Realms.requireValid(realm);
            if (secret == null) {
                throw new IllegalArgumentException("realm " + Realms.printable(realm)
                        + " has no secret: a realm's connections prove they hold its secret");
            }
        }
    }

    /** One secret per node (or none), no realms. */
    public NodeOptions(String bindHost, String advertisedHost, ControlHandler controlHandler, byte[] secret) {
        this(bindHost, advertisedHost, controlHandler, secret, null, null);
    }

    /** Loopback, no control messages, no authentication: tests and benchmarks. */
    public static NodeOptions loopback() {
        return new NodeOptions("127.0.0.1", "127.0.0.1", ControlHandler.NONE, null);
    }

    public NodeOptions withControlHandler(ControlHandler handler) {
        return new NodeOptions(bindHost, advertisedHost, handler, secret, realm, secrets);
    }

    public NodeOptions withSecret(byte[] newSecret) {
        return new NodeOptions(bindHost, advertisedHost, controlHandler, newSecret, realm, secrets);
    }

    /** Outgoing connections name {@code newRealm} and prove they hold its {@code realmSecret}. */
    public NodeOptions withRealm(String newRealm, byte[] realmSecret) {
        return new NodeOptions(bindHost, advertisedHost, controlHandler, realmSecret, newRealm, secrets);
    }

    /** Accepted connections must name a realm {@code resolver} knows and prove they hold its secret. */
    public NodeOptions withSecrets(SecretResolver resolver) {
        return new NodeOptions(bindHost, advertisedHost, controlHandler, secret, realm, resolver);
    }

    /** Whether these options use realms (a realm for outgoing connections, or secrets per realm for accepted ones). */
    public boolean usesRealms() {
        return realm != null || secrets != null;
    }
}
