package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How a verbs node opens a channel to a peer: the peer's hello over the control connection (its rdma_cm
 * port and READ depth, hence the READ window), then the first queue pair, with the configured retries.
 * With authentication on, every queue pair is first announced to the peer over the authenticated control
 * connection, and its connect request carries the proof the peer asks for.
 */
final class ChannelOpener {
    private static final Logger LOG = LoggerFactory.getLogger(VerbsNode.class); // the node's log, as before the split

    private final VerbsNode node;
    private final RdmaShuffleConf conf;
    private final VerbsDevice verbs;
    private final VerbsControl control;
    private final QueuePairParameters queuePairs;
    private final boolean authenticated;
    private final byte[] secret;
    /** The address this node's rdma_cm listens on, and its queue pairs connect from. */
    private final InetAddress rdmaAddress;
    /** Peers this node has opened a channel to (bounded by the cluster's executors). */
    private final Set<NodeAddress> peersSeen = ConcurrentHashMap.newKeySet();
    private final LongAdder channelsOpened = new LongAdder();

    ChannelOpener(VerbsNode node, RdmaShuffleConf conf, VerbsDevice verbs, VerbsControl control, byte[] secret) {
        this.node = node;
        this.conf = conf;
        this.verbs = verbs;
        this.control = control;
        this.queuePairs = node.queuePairParameters();
        this.authenticated = secret != null;
        this.secret = secret == null ? null : secret.clone();
        this.rdmaAddress = verbs.address();
    }

    long channelsOpened() {
        return channelsOpened.sum();
    }

    /** A new channel to {@code peer}, its first queue pair connected. */
    VerbsChannel open(NodeAddress peer) throws TransportException {
        ByteBuffer hello = control.hello(peer);
        int port = hello.getInt(hello.position());
        int peerReadDepth = hello.getInt(hello.position() + 4);
        int window;
        try {
            window = queuePairs.readWindow(conf.maxReadsInFlightPerPeer(), peerReadDepth);
        } catch (IllegalArgumentException e) {
            throw new TransportException("cannot connect to " + peer + ": " + e.getMessage(), ReadStatus.PROTOCOL_ERROR,
                    e);
        }
        String connection = queuePairs.describe(conf.maxReadsInFlightPerPeer(), peerReadDepth, verbs.depths());
        InetSocketAddress target = new InetSocketAddress(peer.host(), port);
        int attempts = conf.connectRetries() + 1;
        IOException last = null;
        for (int a = 1; a <= attempts; a++) {
            node.ensureOpen();
            VerbsChannel ch = new VerbsChannel(node, peer, target, window,
                    conf.requestTimeoutMs(), conf.verbsStallCheckMs(), connection);
            try {
                ch.start(conf.connectTimeoutMs());
                LOG.info("queue pair to {} ({} on {}): {}", peer, target, verbs.name(), connection);
                channelsOpened.increment();
                if (!peersSeen.add(peer)) {
                    node.countReconnect();
                }
                return ch;
            } catch (IOException e) {
                last = e;
                LOG.debug("rdma_cm connect attempt {}/{} to {} failed: {}", a, attempts, target, e.toString());
                if (a < attempts) {
                    try {
                        Thread.sleep(conf.connectRetryWaitMs());
                    } catch (InterruptedException ie) {
                        Thread.currentThread().interrupt();
                        throw new TransportException("interrupted while connecting to " + peer, ie);
                    }
                }
            }
        }
        throw new TransportException("cannot connect to " + peer + " (rdma_cm " + target + ") after " + attempts
                + " attempt(s): " + (last == null ? "?" : last.getMessage()), ReadStatus.CONNECTION_LOST, last);
    }

    /**
     * A connected client queue pair to {@code target}, {@code peer}'s rdma_cm listener. With
     * authentication on, the queue pair is first announced to the peer over the authenticated control
     * connection (from this node's RDMA address), since rdma_cm's own connect request proves nothing;
     * where both devices carry rdma_cm private data the peer answers with a nonce, and the connect request
     * carries the proof of the secret over it ({@link QueuePairAdmissions}).
     */
    QueuePair openEndpoint(NodeAddress peer, InetSocketAddress target, long timeoutMs) throws IOException {
        byte[] privateData = announce(peer);
        return verbs.connect(target, timeoutMs, privateData);
    }

    /**
     * With authentication on, announces one queue pair to {@code peer} over the authenticated control
     * connection.
     *
     * @return what its connect request must carry (the proof over the peer's nonce), or null
     */
    byte[] announce(NodeAddress peer) throws IOException {
        node.ensureOpen();
        if (!authenticated) {
            return null;
        }
        byte[] nonce = control.announce(peer, rdmaAddress, verbs.carriesProof());
        return nonce == null ? null : QueuePairAdmissions.proof(secret, nonce, rdmaAddress);
    }
}
