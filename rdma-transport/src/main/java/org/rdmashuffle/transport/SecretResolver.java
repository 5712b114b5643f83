package org.rdmashuffle.transport;

/**
 * The secret of each realm a node serves (a realm: e.g. one MapReduce job, whose secret is its job
 * token). A node given one ({@link NodeOptions#withSecrets}) accepts only connections that name a realm
 * and prove they hold its secret; each such connection READs only regions registered for its realm.
 *
 * <p>Called on the node's serving thread, once per handshake of a connection that names a realm, while
 * other threads may add and remove realms: it must be thread-safe and quick (a map lookup; no I/O, no
 * waiting; on the verbs provider it is also called on the rdma_cm thread, under the node's admission locks,
 * once per connect request: it must never call back into the node, e.g. {@link RdmaNode#closeRealm}, nor wait
 * for a thread that may). The node neither modifies nor keeps the array past that handshake. A realm removed (its job
 * finished) refuses new connections from then on; connections already authenticated for it stay until
 * they close, and its regions stay readable by them until they are closed.
 */
@FunctionalInterface
public interface SecretResolver {
    /**
     * @param realm the realm a connecting peer names (valid as {@link Realms#requireValid} checks)
     * @return the realm's secret, or {@code null} (or an empty array) when this node does not know the realm
     */
    byte[] secretOf(String realm);
}
