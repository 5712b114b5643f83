package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeoutException;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.HandshakeRefusedException;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.TransportException;
import org.rdmashuffle.transport.tcp.TcpNode;

/**
 * A verbs node's control path: the authenticated TCP control connection (a tcp node at the port the
 * verbs node advertises) and the small two-sided messages it carries — the hello that gives a peer the
 * rdma_cm port and READ depth, the announcement of a queue pair about to connect, keep-alives naming an
 * accepted queue pair, the diagnosis of a READ the peer refused, and the user's own messages. READ data
 * never crosses it. The first byte of every message is its kind.
 */
final class VerbsControl implements AutoCloseable {
    private static final byte OP_USER = 0;
    private static final byte OP_HELLO = 1;
    private static final byte OP_DIAGNOSE = 2;
    private static final byte OP_ADMIT = 3;
    private static final byte OP_KEEPALIVE = 4;
    /** In an admit message: the requester's device sends a proof in rdma_cm private data when given a nonce. */
    private static final byte ADMIT_PROVES = 1;

    private final VerbsNode node;
    private final RdmaShuffleConf conf;
    private final ControlHandler userHandler;
    private final TcpNode tcp;

    /** Starts the control node (listening at once: the verbs node's device must be open). */
    VerbsControl(VerbsNode node, RdmaShuffleConf conf, NodeOptions options) throws IOException {
        this.node = node;
        this.conf = conf;
        this.userHandler = options.controlHandler();
        this.tcp = new TcpNode(conf, options.withControlHandler(new ControlHandler() {
            @Override
            public ByteBuffer onMessage(ByteBuffer request) throws Exception {
                return onControl(null, request);
            }

            @Override
            public CompletableFuture<ByteBuffer> onMessageAsync(String realm, ByteBuffer request) {
                return onControlAsync(realm, request);
            }
        }));
    }

    /** The tcp node carrying the control path. */
    TcpNode tcp() {
        return tcp;
    }

    /**
     * A user message's reply is the user handler's future, passed through (it may complete later: the tcp node
     * serves other connections meanwhile); the node's own messages are answered at once. {@code realm} is the
     * one the control connection proved (a node with secrets per realm), else null.
     */
    private CompletableFuture<ByteBuffer> onControlAsync(String realm, ByteBuffer request) {
        if (request.hasRemaining() && request.get(request.position()) == OP_USER && !node.isClosed()) {
            try {
                CompletableFuture<ByteBuffer> reply = userHandler.onMessageAsync(realm,
                        request.slice(request.position() + 1, request.remaining() - 1));
                return reply != null ? reply
                        : CompletableFuture.failedFuture(new NullPointerException("the handler returned no future"));
            } catch (Throwable e) {
                return CompletableFuture.failedFuture(e);
            }
        }
        try {
            return CompletableFuture.completedFuture(onControl(realm, request));
        } catch (Throwable e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    private ByteBuffer onControl(String realm, ByteBuffer request) throws Exception {
        if (!request.hasRemaining()) {
            throw new IllegalArgumentException("empty verbs control message");
        }
        if (node.isClosed()) {
            throw new IllegalStateException("node is closing"); // a diagnosis now would blame the READ, not the peer
        }
        byte op = request.get();
        switch (op) {
            case OP_USER:
                return userHandler.onMessage(realm, request.slice());
            case OP_HELLO:
                return ByteBuffer.allocate(8).putInt(0, node.rdmaPort())
                        .putInt(4, node.queuePairParameters().readDepth());
            case OP_ADMIT: {
                boolean proves = request.get() == ADMIT_PROVES;
                byte[] ip = new byte[request.remaining()];
                request.get(ip);
                byte[] nonce = node.acceptor().admit(InetAddress.getByAddress(ip), proves,
                        node.carriesProof(), realm); // on a node with realms, the queue pair is bound to it
                return nonce == null ? null : ByteBuffer.wrap(nonce);
            }
            case OP_KEEPALIVE: {
                int port = request.getShort() & 0xFFFF;
                byte[] ip = new byte[request.remaining()];
                request.get(ip);
                node.acceptor().touch(new InetSocketAddress(InetAddress.getByAddress(ip), port), System.nanoTime());
                return null;
            }
            case OP_DIAGNOSE: {
                int rkey = request.getInt();
                long addr = request.getLong();
                int len = request.getInt();
                return ByteBuffer.allocate(1).put(0, (byte) node.memory().check(rkey, addr, len, realm));
            }
            default:
                throw new IllegalArgumentException("unknown verbs control message " + op);
        }
    }

    private static NodeAddress controlAddress(NodeAddress peer) {
        return new NodeAddress(peer.host(), peer.port(), TcpNode.PROVIDER);
    }

    private ByteBuffer call(NodeAddress peer, ByteBuffer message) throws IOException {
        RdmaChannel ch = tcp.connect(controlAddress(peer));
        try {
            return Pauses.get(ch.call(message), conf.requestTimeoutMs());
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            throw c instanceof IOException io ? io : new TransportException(String.valueOf(c), c);
        } catch (TimeoutException e) {
            throw new TransportException("no reply from " + peer + " within " + conf.keyName(RdmaShuffleConf.REQUEST_TIMEOUT),
                    ReadStatus.TIMEOUT, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException("interrupted waiting for " + peer, e);
        }
    }

    /** A user message to {@code peer}'s control handler. */
    CompletableFuture<ByteBuffer> userCall(NodeAddress peer, ByteBuffer request) {
        ByteBuffer m = ByteBuffer.allocate(1 + request.remaining());
        m.put(OP_USER).put(request.duplicate()).flip();
        try {
            return tcp.connect(controlAddress(peer)).call(m);
        } catch (TransportException e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    /**
     * {@code peer}'s hello: its rdma_cm port and READ depth.
     *
     * @throws TransportException when it cannot be asked, or is no verbs node
     */
    ByteBuffer hello(NodeAddress peer) throws TransportException {
        ByteBuffer hello;
        try {
            hello = call(peer, ByteBuffer.wrap(new byte[] {OP_HELLO}));
        } catch (IOException e) {
            throw new TransportException("cannot connect to " + peer + ": " + e.getMessage(), ReadStatus.CONNECTION_LOST,
                    e);
        }
        // Exactly a port and a depth: a tcp node's handler answers the hello with a reply of its own protocol
        // (a MapReduce service: a refusal of a few dozen bytes), never to be read as a port.
        if (hello == null || hello.remaining() != 8 || hello.getInt(hello.position()) < 1
                || hello.getInt(hello.position()) > 0xFFFF || hello.getInt(hello.position() + 4) < 1) {
            throw new HandshakeRefusedException("cannot connect to " + peer + ": its control port answers as no verbs "
                    + "node does (a node of the tcp provider? the providers differ: "
                    + conf.keyName(RdmaShuffleConf.PROVIDER) + " must lead both ends to the same one)",
                    HandshakeRefusedException.Reason.NOT_RDMA_SHUFFLE, null);
        }
        return hello;
    }

    /** Asks {@code peer} what a READ of {@code len} bytes at {@code addr} under {@code rkey} would get. */
    int askPeer(NodeAddress peer, int rkey, long addr, int len) throws IOException {
        ByteBuffer m = ByteBuffer.allocate(17).put(OP_DIAGNOSE).putInt(rkey).putLong(addr).putInt(len).flip();
        ByteBuffer reply = call(peer, m);
        if (reply.remaining() != 1) {
            throw new TransportException("malformed diagnosis from " + peer, ReadStatus.PROTOCOL_ERROR, null);
        }
        return reply.get(reply.position()) & 0xFF;
    }

    /**
     * Announces one queue pair from {@code rdmaAddress} to {@code peer}.
     *
     * @return the peer's nonce, or null when it asked for no proof
     */
    byte[] announce(NodeAddress peer, InetAddress rdmaAddress, boolean proves) throws IOException {
        byte[] ip = rdmaAddress.getAddress();
        ByteBuffer reply = call(peer, ByteBuffer.allocate(2 + ip.length).put(OP_ADMIT)
                .put(proves ? ADMIT_PROVES : 0).put(ip).flip());
        if (reply == null || reply.remaining() != QueuePairAdmissions.NONCE_BYTES) {
            return null;
        }
        byte[] nonce = new byte[QueuePairAdmissions.NONCE_BYTES];
        reply.duplicate().get(nonce);
        return nonce;
    }

    /**
     * Tells {@code peer} that the queue pair at {@code qp} (this node's end) is alive, off the caller's
     * thread; {@code c} hears whether it answered.
     */
    void sendKeepAlive(VerbsChannel c, NodeAddress peer, InetSocketAddress qp) {
        if (qp == null || qp.getAddress() == null) {
            return;
        }
        byte[] ip = qp.getAddress().getAddress();
        ByteBuffer m = ByteBuffer.allocate(3 + ip.length).put(OP_KEEPALIVE).putShort((short) qp.getPort()).put(ip)
                .flip();
        node.execute(() -> {
            try {
                call(peer, m);
                c.keepAliveAnswered(true, null);
            } catch (IOException | RuntimeException e) {
                c.keepAliveAnswered(false, e.getMessage());
            }
        });
    }

    @Override
    public void close() {
        tcp.close();
    }
}
