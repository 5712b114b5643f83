package org.rdmashuffle.transport.tcp;

import org.rdmashuffle.conf.RdmaShuffleConf;

/**
 * The keys a tcp node's messages name, as its configuration was read ({@link RdmaShuffleConf#keyName}):
 * {@code spark.shuffle.rdma.*} on a Spark executor, {@code mapreduce.shuffle.rdma.*} on a NodeManager's service.
 * Built once when the node starts, with the reasons its responder closes a connection for, so that naming a key
 * costs nothing where a deadline is checked.
 */
final class KeyNames {
    final String maxConnections;
    final String maxConnectionsPerAddress;
    final String maxHandshakingConnections;
    final String maxConnectionsPerRealm;
    final String maxControlMessageSize;
    final String connectTimeout;
    final String requestTimeout;
    final String idleTimeout;
    final String port;
    final String portMaxRetries;
    /** What a handshake answered busy means. */
    final String busy;
    /** Why a connection is closed (the responder's deadlines). */
    final String noHandshake;
    final String controlReplyLate;
    final String frameLate;
    final String replyUnread;
    final String idleNotReading;
    final String idle;
    /** What a handshake refused as authentication on at one side only means: Spark's key, or no key. */
    final String authMismatch;
    /** Why a draining connection is closed. */
    final String drainLate;

    KeyNames(RdmaShuffleConf conf) {
        maxConnections = conf.keyName(RdmaShuffleConf.MAX_CONNECTIONS);
        maxConnectionsPerAddress = conf.keyName(RdmaShuffleConf.MAX_CONNECTIONS_PER_ADDRESS);
        maxHandshakingConnections = conf.keyName(RdmaShuffleConf.MAX_HANDSHAKING_CONNECTIONS);
        maxConnectionsPerRealm = conf.keyName(RdmaShuffleConf.MAX_CONNECTIONS_PER_REALM);
        maxControlMessageSize = conf.keyName(RdmaShuffleConf.MAX_CONTROL_MESSAGE_SIZE);
        connectTimeout = conf.keyName(RdmaShuffleConf.CONNECT_TIMEOUT);
        requestTimeout = conf.keyName(RdmaShuffleConf.REQUEST_TIMEOUT);
        idleTimeout = conf.keyName(RdmaShuffleConf.IDLE_TIMEOUT);
        port = conf.keyName(RdmaShuffleConf.PORT);
        portMaxRetries = conf.keyName(RdmaShuffleConf.PORT_MAX_RETRIES);
        String frameTimeout = conf.keyName(RdmaShuffleConf.FRAME_TIMEOUT);
        busy = "the peer serves as many connections as its limits allow (" + maxConnections + ", "
                + maxHandshakingConnections + ", " + maxConnectionsPerAddress + ", " + maxConnectionsPerRealm + ")";
        noHandshake = "no handshake within " + connectTimeout;
        controlReplyLate = "its control reply was not ready within " + idleTimeout;
        frameLate = "a frame's remaining bytes did not arrive within " + frameTimeout;
        replyUnread = "one reply was not read within " + idleTimeout + " (a reader that trickles)";
        idleNotReading = "no byte moved for " + idleTimeout + " (the peer stopped reading its replies)";
        idle = "no byte moved for " + idleTimeout + " (idle)";
        // Spark's key on a Spark executor; a MapReduce service authenticates with each job's token (no key).
        authMismatch = conf.keyPrefix().equals(RdmaShuffleConf.PREFIX)
                ? "one side has spark.authenticate on and the other off" : Wire.AUTH_MISMATCH;
        drainLate = "peer did not close within " + connectTimeout + " after an error reply";
    }
}
