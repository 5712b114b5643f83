package org.rdmashuffle.transport.tcp;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.Mappings;
import org.rdmashuffle.transport.RateLimitedLog;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.Realms;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.SecretResolver;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The serving side of a tcp node: one thread that accepts connections and answers READ requests
 * from the registration table, sending payload straight from registered memory (direct buffers and
 * mapped files) to the socket. Requests on a connection are pipelined and answered in order. A bad
 * request gets an error reply and the connection goes on; an unparseable frame gets an error reply
 * and the connection is closed. This is the only thread of a node that runs per remote READ.
 *
 * <p>Everything a reply is made of belongs to its connection: a pending payload is a view borrowed
 * for that reply alone, so no other connection's request can move it. What a peer can make the node
 * hold is bounded ({@link Limits}): connections, connections from one source address, handshaking
 * connections (which hold no direct memory), connections draining after an error reply (which hold no
 * buffer), control bodies (which grow with the bytes that arrive), time to finish a frame, time without
 * traffic. Anything thrown while serving one connection closes that connection only; if the loop itself
 * cannot go on, the node is reported failed and every connection is closed.
 *
 * <p>Fairness: in one wakeup of the loop a connection reads at most {@link #READ_BUDGET_BYTES} and
 * writes at most about {@link #WRITE_BUDGET_BYTES} (one write past it), and the listener accepts at
 * most {@link #ACCEPT_BUDGET} connections, whatever the peers send. A connection that stops at its
 * budget with work left is carried to the next wakeup, which then polls without waiting, so every
 * ready connection and the listener get their turn in every wakeup. A handshake that is refused or
 * fails gives its handshake slot back at once.
 *
 * <p>Realms: on a node with secrets per realm ({@link SecretResolver}), every connection names a realm in
 * its HELLO and proves it holds that realm's secret; the resolver is asked once, when the proof arrives. Such
 * a connection READs only regions registered for its realm: any other rkey is answered as an unknown one
 * (one string comparison per READ, no allocation), and its control messages reach the handler with its
 * realm. A refusal for a realm (unknown, wrong proof, none named) is a refused handshake like any other:
 * counted, logged at most once per 10 s, its slot given back at once.
 */
final class TcpResponder implements Runnable {
    private static final Logger LOG = LoggerFactory.getLogger(TcpResponder.class);
    /** Payloads up to this size are copied next to their header; larger ones are written from the region. */
    private static final int INLINE_PAYLOAD_BYTES = 8192;
    /** Input buffer of a handshaken connection: requests are 24 bytes, so this holds hundreds. */
    static final int IN_BUFFER_BYTES = 16 << 10;
    /** Output buffer of a handshaken connection: reply headers and inline payloads. */
    static final int OUT_BUFFER_BYTES = 64 << 10;
    /** Heap output buffer of a connection before its handshake completes (no direct memory until then). */
    static final int HANDSHAKE_BUFFER_BYTES = 64;
    /** Heap input buffer of a connection before its handshake completes: the longest HELLO and the AUTH. */
    static final int HANDSHAKE_IN_BUFFER_BYTES = Wire.MAX_HELLO_BYTES + Wire.AUTH_BYTES;
    /** A control body's buffer starts this small and doubles as bytes arrive, up to the claimed length. */
    private static final int CONTROL_INITIAL_BYTES = 1024;
    private static final long EXPIRY_CHECK_NANOS = 100_000_000L;
    /**
     * A handshaking connection younger than this is never evicted to make room (its HELLO may simply not
     * be read yet); a new connection that finds only such ones is refused busy and retries.
     */
    private static final long HANDSHAKE_GRACE_NANOS = 250_000_000L;
    /** Bytes one connection may read in one wakeup of the loop: one input buffer's worth. */
    static final int READ_BUDGET_BYTES = IN_BUFFER_BYTES;
    /** Bytes one connection may write in one wakeup (it stops at the first write that reaches it). */
    static final int WRITE_BUDGET_BYTES = 256 << 10;
    /** Connections the listener accepts (or refuses) in one wakeup. */
    static final int ACCEPT_BUDGET = 64;
    /**
     * Input a connection may send after its error reply, beyond one control body: more than an honest
     * peer can have had in flight when the reply was sent (its pipelined 24-byte requests and a body).
     */
    private static final int DRAIN_SLACK_BYTES = 1 << 20;
    private static final ByteBuffer EMPTY = ByteBuffer.allocate(0);

    /** What one peer can make this node hold. */
    record Limits(int maxConnections, int maxConnectionsPerAddress, int maxHandshaking, int maxControlBytes,
                  long handshakeTimeoutMs, long idleTimeoutMs, long frameTimeoutMs) {
        static Limits from(RdmaShuffleConf conf) {
            return new Limits(conf.maxConnections(), conf.maxConnectionsPerAddress(), conf.maxHandshakingConnections(),
                    conf.maxControlMessageSizeBytes(), conf.connectTimeoutMs(), conf.idleTimeoutMs(),
                    conf.frameTimeoutMs());
        }

        /** Connections kept draining after an error reply at most (the oldest is reset past it). */
        int maxDraining() {
            return maxHandshaking;
        }

        /** Bytes a draining connection may send before it is reset. */
        long maxDrainBytes() {
            return (long) maxControlBytes + DRAIN_SLACK_BYTES;
        }
    }

    /** The connections one source address holds; touched by the responder thread only. */
    private static final class Source {
        final InetAddress address;
        int connections;
        int handshaking;

        Source(InetAddress address) {
            this.address = address;
        }
    }

    private final TcpNode node;
    private final ServerSocketChannel server;
    private final Selector selector;
    private final RegionTable table;
    private final ControlHandler handler;
    private final byte[] secret;
    /** The secret of each realm, on a node that keeps one per realm; null on every other node. */
    private final SecretResolver secrets;
    private final Limits limits;
    private final long handshakeTimeoutNanos;
    private final long idleTimeoutNanos;
    private final long frameTimeoutNanos;
    private final List<Connection> connections = new ArrayList<>();
    /** Connections by source address, for the per-address cap; an entry goes when its last connection does. */
    private final Map<InetAddress, Source> sources = new HashMap<>();
    /** Connections that stopped at their budget with work left, served again next wakeup (no allocation once grown). */
    private ArrayList<Connection> carried = new ArrayList<>();
    private ArrayList<Connection> carriedSpare = new ArrayList<>();
    /** Where draining connections' input goes: read and dropped, shared because nobody looks at it. */
    private final ByteBuffer drainBuffer = ByteBuffer.allocateDirect(READ_BUDGET_BYTES);
    private boolean drainReleased;
    private final java.util.function.Consumer<SelectionKey> onKey = this::service;
    /** One window per kind of line, so a flood of one kind hides no other. */
    private final RateLimitedLog refusalLog = new RateLimitedLog(LOG, 10_000);
    private final RateLimitedLog limitLog = new RateLimitedLog(LOG, 10_000);
    private final RateLimitedLog handshakeLog = new RateLimitedLog(LOG, 10_000);
    private final RateLimitedLog errorLog = new RateLimitedLog(LOG, 10_000);
    private int handshaking;
    private int draining;
    /** Wakeups of the loop so far; a connection served in this one has had its share. */
    private long round;
    private long lastExpiryCheck = System.nanoTime();
    private volatile boolean running = true;

    // Written by the responder thread only.
    volatile long readsServed;
    volatile long readsRefused;
    volatile long bytesServed;
    volatile long connectionsRefused;
    /** Of {@link #connectionsRefused}: those refused because their source address held its cap. */
    volatile long connectionsRefusedPerAddress;
    volatile long connectionsClosedByLimit;
    volatile long connectionsEvictedIdle;
    volatile int connectionCount;

    TcpResponder(TcpNode node, ServerSocketChannel server, RegionTable table, ControlHandler handler, byte[] secret,
                 SecretResolver secrets, Limits limits) throws IOException {
        this.node = node;
        this.server = server;
        this.table = table;
        this.handler = handler;
        this.secret = secret;
        this.secrets = secrets;
        this.limits = limits;
        this.handshakeTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(limits.handshakeTimeoutMs());
        this.idleTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(limits.idleTimeoutMs());
        this.frameTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(limits.frameTimeoutMs());
        Selector sel = Selector.open();
        try {
            server.configureBlocking(false);
            server.register(sel, SelectionKey.OP_ACCEPT);
        } catch (IOException | RuntimeException e) {
            sel.close();
            Mappings.unmap(drainBuffer);
            throw e;
        }
        this.selector = sel;
    }

    void stop() {
        running = false;
        selector.wakeup();
    }

    @Override
    public void run() {
        try {
            while (running) {
                round++;
                if (carried.isEmpty()) {
                    selector.select(onKey, 100);
                } else {
                    selector.selectNow(onKey); // work is left over: poll, and serve it after the ready ones
                }
                serveCarried();
                long now = System.nanoTime();
                if (now - lastExpiryCheck > EXPIRY_CHECK_NANOS) {
                    lastExpiryCheck = now;
                    expire(now);
                }
            }
        } catch (Throwable t) {
            if (running) {
                LOG.error("tcp responder of {} cannot go on: the node stops serving and closes every served "
                        + "connection, so readers fail over to Spark's recovery", node.localAddress(), t);
                node.responderFailed(t);
            }
        } finally {
            releaseAll();
        }
    }

    /** Closes every connection, the listening socket and the selector; safe to call again from any thread once the loop ended. */
    void releaseAll() {
        for (int i = connections.size() - 1; i >= 0; i--) {
            try {
                connections.get(i).close();
            } catch (Throwable t) {
                LOG.debug("closing a served connection", t);
            }
        }
        connections.clear();
        connectionCount = 0;
        try {
            server.close();
        } catch (IOException e) {
            LOG.debug("closing the server socket", e);
        }
        try {
            selector.close();
        } catch (IOException e) {
            LOG.debug("closing selector", e);
        }
        carried.clear();
        carriedSpare.clear();
        sources.clear();
        if (!drainReleased) {
            drainReleased = true;
            Mappings.unmap(drainBuffer);
        }
    }

    /** Serves the connections carried over from the last wakeup that have not had their turn in this one. */
    private void serveCarried() {
        if (carried.isEmpty()) {
            return;
        }
        ArrayList<Connection> due = carried;
        carried = carriedSpare;
        carriedSpare = due;
        for (int i = 0; i < due.size(); i++) {
            Connection c = due.get(i);
            if (c.state == State.CLOSED) {
                c.carriedOver = false;
            } else if (c.servicedRound == round) {
                carried.add(c); // served (and budgeted) already in this wakeup: its turn comes next time
            } else {
                c.carriedOver = false;
                serve(c);
            }
        }
        due.clear();
    }

    private void service(SelectionKey k) {
        if (!k.isValid()) {
            return;
        }
        if (k.isAcceptable()) {
            try {
                accept();
            } catch (Throwable t) {
                errorLog.warn("accepting a connection failed: {}", t.toString());
            }
            return;
        }
        serve((Connection) k.attachment());
    }

    /** One connection's turn in this wakeup, within its budget. */
    private void serve(Connection c) {
        c.servicedRound = round;
        try {
            c.service();
        } catch (IOException e) {
            LOG.debug("closing connection from {}: {}", c.remote, e.toString());
            c.close();
        } catch (Throwable t) {
            // One connection's failure (a bug, or an Error such as running out of memory) ends that
            // connection only; the loop goes on for every other peer.
            errorLog.warn("closing connection from {} after an unexpected error: {}", c.remote, t.toString());
            LOG.debug("the error", t);
            c.close();
        }
    }

    private void accept() throws IOException {
        SocketChannel ch;
        for (int accepted = 0; accepted < ACCEPT_BUDGET && (ch = server.accept()) != null; accepted++) {
            InetAddress from = null;
            try {
                SocketAddress r = ch.getRemoteAddress();
                from = r instanceof InetSocketAddress isa ? isa.getAddress() : null;
            } catch (IOException e) {
                LOG.debug("remote address of an accepted connection", e);
            }
            Source src = from == null ? null : sources.get(from);
            // At its address's cap: a connection draining after an error reply goes first, then the address's
            // oldest connection still in its handshake past the grace period — so silent sockets of someone
            // without the secret on an honest peer's host cannot lock that host out.
            if (src != null && src.connections >= limits.maxConnectionsPerAddress() && !evictOldestDraining(src)
                    && !evictOldestHandshaking(src)) {
                connectionsRefusedPerAddress++;
                refuseBusy(ch, src);
                continue;
            }
            if (connections.size() >= limits.maxConnections()) {
                // A connection draining after an error reply is worth less than a new one.
                evictOldestDraining(null);
            }
            if (handshaking >= limits.maxHandshaking()) {
                evictForHandshake();
            }
            if (connections.size() >= limits.maxConnections() || handshaking >= limits.maxHandshaking()) {
                refuseBusy(ch, null);
                continue;
            }
            try {
                ch.configureBlocking(false);
                ch.socket().setTcpNoDelay(true);
                // Looked up again: an eviction above may have closed the address's last connection.
                src = from == null ? null : sources.get(from);
                if (src == null && from != null) {
                    src = new Source(from);
                    sources.put(from, src);
                }
                Connection c = new Connection(ch, src);
                c.key = ch.register(selector, SelectionKey.OP_READ, c);
                connections.add(c);
                connectionCount = connections.size();
                handshaking++;
                if (src != null) {
                    src.connections++;
                    src.handshaking++;
                }
            } catch (IOException | RuntimeException e) {
                if (src != null && src.connections == 0) {
                    sources.remove(src.address, src);
                }
                ch.close();
                throw e;
            }
        }
    }

    /**
     * Answers a connection past a limit with handshake status busy and closes it at once; {@code src} is
     * the source address that holds its cap, or null for the node's limits.
     */
    private void refuseBusy(SocketChannel ch, Source src) {
        connectionsRefused++;
        String remote = "?";
        try {
            remote = String.valueOf(ch.getRemoteAddress());
            ch.configureBlocking(false);
            ByteBuffer b = ByteBuffer.allocate(Wire.CHALLENGE_BYTES);
            b.putInt(Wire.MAGIC).putShort(Wire.VERSION).putShort((short) Wire.HS_BUSY).put(new byte[Wire.NONCE_BYTES]);
            ch.write(b.flip());
        } catch (IOException e) {
            LOG.debug("refusing {}", remote, e);
        } finally {
            try {
                ch.close();
            } catch (IOException e) {
                LOG.debug("closing refused {}", remote, e);
            }
        }
        if (src != null) {
            refusalLog.warn("refused a connection from {}: its address holds {} connections; limit "
                    + "spark.shuffle.rdma.maxConnectionsPerAddress={}", remote, src.connections,
                    limits.maxConnectionsPerAddress());
        } else {
            refusalLog.warn("refused a connection from {}: {} connections served ({} handshaking); limits "
                            + "spark.shuffle.rdma.maxConnections={}, spark.shuffle.rdma.maxHandshakingConnections={}",
                    remote, connections.size(), handshaking, limits.maxConnections(), limits.maxHandshaking());
        }
    }

    /**
     * Makes room for a new connection in the handshake by resetting one still in its handshake: the
     * oldest of the source address that holds the most handshake slots, if it holds more than one (so
     * one host cannot keep every slot, however young its sockets); else the oldest older than a grace
     * period (one that has not finished a single round trip by then is far likelier a silent peer than a
     * slow one). A refused or failed handshake holds no slot at all.
     */
    private void evictForHandshake() {
        Connection victim = null;
        int victimWeight = 0;
        long now = System.nanoTime();
        for (int i = 0; i < connections.size(); i++) {
            Connection c = connections.get(i);
            if (!c.inHandshake) {
                continue;
            }
            int weight = c.source == null ? 1 : c.source.handshaking;
            if (weight <= 1 && now - c.acceptedNanos <= HANDSHAKE_GRACE_NANOS) {
                continue;
            }
            if (victim == null || weight > victimWeight
                    || (weight == victimWeight && c.acceptedNanos - victim.acceptedNanos < 0)) {
                victim = c;
                victimWeight = weight;
            }
        }
        if (victim != null) {
            connectionsClosedByLimit++;
            limitLog.warn("closing connection from {}: still in its handshake when a new connection came past "
                    + "spark.shuffle.rdma.maxHandshakingConnections={} ({} handshaking from its address)", victim.remote,
                    limits.maxHandshaking(), victimWeight);
            victim.abort();
        }
    }

    /**
     * Resets the connection of {@code src}'s address that has been in its handshake longest, if longer than
     * the grace period; true if there was one. An honest peer finishes its handshake in a round trip or two,
     * so what is left past the grace is silent or slow on purpose.
     */
    private boolean evictOldestHandshaking(Source src) {
        if (src.handshaking == 0) {
            return false;
        }
        long now = System.nanoTime();
        Connection oldest = null;
        for (int i = 0; i < connections.size(); i++) {
            Connection c = connections.get(i);
            if (c.inHandshake && c.source == src && now - c.acceptedNanos > HANDSHAKE_GRACE_NANOS
                    && (oldest == null || c.acceptedNanos - oldest.acceptedNanos < 0)) {
                oldest = c;
            }
        }
        if (oldest == null) {
            return false;
        }
        connectionsClosedByLimit++;
        limitLog.warn("closing connection from {}: still in its handshake when its address reached "
                + "spark.shuffle.rdma.maxConnectionsPerAddress={}", oldest.remote, limits.maxConnectionsPerAddress());
        oldest.abort();
        return true;
    }

    /** Resets the connection that has drained longest (of {@code only}'s address, when given); true if there was one. */
    private boolean evictOldestDraining(Source only) {
        if (draining == 0) {
            return false;
        }
        Connection oldest = null;
        for (int i = 0; i < connections.size(); i++) {
            Connection c = connections.get(i);
            if (c.state == State.DRAINING && (only == null || c.source == only)
                    && (oldest == null || c.drainSinceNanos - oldest.drainSinceNanos < 0)) {
                oldest = c;
            }
        }
        if (oldest == null) {
            return false;
        }
        connectionsClosedByLimit++;
        limitLog.warn("closing connection from {}: draining after an error reply when room was needed (at most "
                + "spark.shuffle.rdma.maxHandshakingConnections={} drain at once)", oldest.remote, limits.maxDraining());
        oldest.abort();
        return true;
    }

    private void expire(long now) {
        for (int i = connections.size() - 1; i >= 0; i--) {
            Connection c = connections.get(i);
            String why = c.expiry(now);
            if (why != null) {
                connectionsClosedByLimit++;
                limitLog.warn("closing connection from {}: {}", c.remote, why);
                c.abort();
            }
        }
    }

    int connectionCount() {
        return connectionCount;
    }

    /** The realm a HELLO names, or null when its bytes are not UTF-8. */
    private static String decodeRealm(byte[] utf8) {
        try {
            return StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(utf8)).toString();
        } catch (CharacterCodingException e) {
            return null;
        }
    }

    /**
     * Connection states: AWAIT_HELLO → AWAIT_AUTH → SERVING ⇄ CONTROL_BODY; any → DRAINING (after an
     * error reply: output shut down, input discarded until the peer closes, so the reply is not lost to
     * a reset) → CLOSED.
     */
    private enum State { AWAIT_HELLO, AWAIT_AUTH, SERVING, CONTROL_BODY, DRAINING, CLOSED }

    /** One accepted connection; touched by the responder thread only. */
    private final class Connection {
        final SocketChannel ch;
        final String remote;
        /** Its source address's count, or null when the address is unknown. */
        final Source source;
        final long acceptedNanos = System.nanoTime();
        /** Holds a handshake slot: accepted, and the handshake neither done nor refused. */
        boolean inHandshake = true;
        /** Small heap buffers until the handshake succeeds, then direct ones. */
        ByteBuffer in = ByteBuffer.allocate(HANDSHAKE_IN_BUFFER_BYTES);
        ByteBuffer out = ByteBuffer.allocate(HANDSHAKE_BUFFER_BYTES);
        final ByteBuffer[] gather = new ByteBuffer[2];
        SelectionKey key;
        State state = State.AWAIT_HELLO;
        /** The pending reply's payload: a view owned by this reply ({@code payloadRegion}'s) or a control reply. */
        ByteBuffer payload;
        TcpRegion payloadRegion;
        ByteBuffer control;
        int controlLength;
        int controlRequestId;
        byte[] clientNonce;
        byte[] serverNonce;
        /**
         * The realm the HELLO named (null: none), and its UTF-8 bytes; once SERVING, the realm the peer proved
         * it holds the secret of. On a node with secrets per realm it decides which regions the peer may READ.
         */
        String realm;
        byte[] realmBytes;
        boolean closeAfterFlush;
        long drainSinceNanos;
        long lastProgressNanos = acceptedNanos;
        /** When the pending payload was queued. */
        long payloadSinceNanos;
        /** When the first bytes of a frame still incomplete arrived; 0 when no frame is partly received. */
        long partialSinceNanos;
        /** The last parse stopped for want of input (not for want of room to reply). */
        boolean starved;
        /** Interest set last given to the key. */
        int interestOps = SelectionKey.OP_READ;
        /** Bytes read and written in the current turn, against the budgets. */
        int readThisTurn;
        long writtenThisTurn;
        /** Bytes discarded since the error reply. */
        long drainedBytes;
        /** The wakeup of the loop that last served it. */
        long servicedRound;
        /** On the list of connections carried to the next wakeup. */
        boolean carriedOver;

        Connection(SocketChannel ch, Source source) {
            this.ch = ch;
            this.source = source;
            String r;
            try {
                r = String.valueOf(ch.getRemoteAddress());
            } catch (IOException e) {
                r = "?";
            }
            this.remote = r;
        }

        /** Why this connection must close now, or null. */
        String expiry(long now) {
            switch (state) {
                case DRAINING:
                    return now - drainSinceNanos > handshakeTimeoutNanos ? "peer did not close after an error reply" : null;
                case AWAIT_HELLO, AWAIT_AUTH:
                    return now - acceptedNanos > handshakeTimeoutNanos
                            ? "no handshake within spark.shuffle.rdma.connectTimeout" : null;
                case CLOSED:
                    return null;
                default:
                    if (partialSinceNanos != 0 && now - partialSinceNanos > frameTimeoutNanos) {
                        return "a frame's remaining bytes did not arrive within spark.shuffle.rdma.frameTimeout";
                    }
                    if (payload != null && now - payloadSinceNanos > idleTimeoutNanos) {
                        return "one reply was not read within spark.shuffle.rdma.idleTimeout (a reader that "
                                + "trickles)";
                    }
                    if (now - lastProgressNanos > idleTimeoutNanos) {
                        return "no byte moved for spark.shuffle.rdma.idleTimeout ("
                                + (payload != null || out.position() > 0 ? "the peer stopped reading its replies"
                                : "idle") + ")";
                    }
                    return null;
            }
        }

        /** One turn: at most {@link #READ_BUDGET_BYTES} read and about {@link #WRITE_BUDGET_BYTES} written. */
        void service() throws IOException {
            readThisTurn = 0;
            writtenThisTurn = 0;
            if (state == State.DRAINING) {
                drain();
                return;
            }
            for (;;) {
                if (!flush()) {
                    interest(SelectionKey.OP_WRITE);
                    return;
                }
                if (closeAfterFlush) {
                    startDraining();
                    if (state == State.DRAINING) {
                        drain();
                    }
                    return;
                }
                if (writtenThisTurn >= WRITE_BUDGET_BYTES) {
                    carryOver();
                    return;
                }
                if (parse()) {
                    continue;
                }
                if (readThisTurn >= READ_BUDGET_BYTES) {
                    carryOver();
                    return;
                }
                int n = ch.read(in);
                if (n < 0) {
                    close();
                    return;
                }
                if (n == 0) {
                    notePartialFrame();
                    interest(SelectionKey.OP_READ);
                    return;
                }
                readThisTurn += n;
                lastProgressNanos = System.nanoTime();
            }
        }

        /** Out of budget with work perhaps left (bytes in {@code in} or the socket): served again next wakeup. */
        private void carryOver() {
            interest(SelectionKey.OP_READ);
            if (!carriedOver) {
                carriedOver = true;
                carried.add(this);
            }
        }

        private void interest(int ops) {
            if (interestOps != ops) {
                key.interestOps(ops);
                interestOps = ops;
            }
        }

        private void notePartialFrame() {
            boolean partial = starved && (in.position() > 0 || state == State.CONTROL_BODY);
            if (!partial) {
                partialSinceNanos = 0;
            } else if (partialSinceNanos == 0) {
                partialSinceNanos = System.nanoTime();
            }
        }

        /**
         * After an error reply has been written: the output is shut down (so the reply is not lost to a
         * reset while the peer still sends) and the connection's buffers go back; its input is discarded
         * until the peer closes. It holds no handshake slot, and at most {@link Limits#maxDraining()}
         * connections drain at once: past that the one draining longest is reset.
         */
        private void startDraining() throws IOException {
            if (inHandshake) {
                leaveHandshake();
            }
            state = State.DRAINING;
            control = null;
            drainSinceNanos = System.nanoTime();
            drainedBytes = 0;
            draining++;
            releaseBuffers();
            interest(SelectionKey.OP_READ);
            ch.shutdownOutput();
            if (draining > limits.maxDraining()) {
                evictOldestDraining(null);
            }
        }

        /**
         * Discards input until the peer closes its side, within this turn's read budget; resets the
         * connection once it has drained for {@code connectTimeout} or sent more than an honest peer could
         * have had in flight ({@link Limits#maxDrainBytes()}), checked at every read.
         */
        private void drain() throws IOException {
            for (;;) {
                String why = null;
                if (System.nanoTime() - drainSinceNanos > handshakeTimeoutNanos) {
                    why = "peer did not close within spark.shuffle.rdma.connectTimeout after an error reply";
                } else if (drainedBytes > limits.maxDrainBytes()) {
                    why = "peer sent more than " + limits.maxDrainBytes() + " bytes after an error reply";
                }
                if (why != null) {
                    connectionsClosedByLimit++;
                    limitLog.warn("closing connection from {}: {}", remote, why);
                    abort();
                    return;
                }
                if (readThisTurn >= READ_BUDGET_BYTES) {
                    carryOver();
                    return;
                }
                drainBuffer.clear();
                int n = ch.read(drainBuffer);
                if (n < 0) {
                    close();
                    return;
                }
                if (n == 0) {
                    return;
                }
                readThisTurn += n;
                drainedBytes += n;
            }
        }

        /** Writes pending reply bytes; true when nothing is left to write. */
        private boolean flush() throws IOException {
            if (out.position() == 0 && payload == null) {
                return true;
            }
            out.flip();
            long n;
            if (payload == null) {
                n = ch.write(out);
            } else {
                gather[0] = out;
                gather[1] = payload;
                n = ch.write(gather);
            }
            if (n > 0) {
                lastProgressNanos = System.nanoTime();
                writtenThisTurn += n;
            }
            boolean done = !out.hasRemaining() && (payload == null || !payload.hasRemaining());
            out.compact();
            if (done && payload != null) {
                releasePayload();
            }
            return done;
        }

        private void releasePayload() {
            if (payloadRegion != null) {
                payloadRegion.returnServeView(payload);
                payloadRegion.unuse();
                payloadRegion = null;
            }
            payload = null;
            gather[1] = null;
        }

        /** Room a reply of the current state needs in {@code out}. */
        private int replyRoom() {
            return switch (state) {
                case AWAIT_HELLO -> Wire.CHALLENGE_BYTES;
                case AWAIT_AUTH -> Wire.WELCOME_BYTES;
                default -> Wire.REPLY_HEADER_BYTES + INLINE_PAYLOAD_BYTES;
            };
        }

        /** Consumes complete frames from {@code in}; true when it produced output or changed state. */
        private boolean parse() {
            in.flip();
            boolean progressed = false;
            starved = false;
            try {
                while (payload == null && !closeAfterFlush && out.remaining() >= replyRoom()) {
                    boolean step = switch (state) {
                        case AWAIT_HELLO -> hello();
                        case AWAIT_AUTH -> auth();
                        case SERVING -> request();
                        case CONTROL_BODY -> controlBody();
                        case DRAINING, CLOSED -> false;
                    };
                    if (!step) {
                        starved = true;
                        break;
                    }
                    progressed = true;
                }
            } finally {
                in.compact();
            }
            if (progressed) {
                partialSinceNanos = 0;
            }
            if (state == State.SERVING && !in.isDirect()) {
                upgradeBuffers();
            }
            return progressed;
        }

        /** After the handshake: the direct buffers that serving needs, carrying over any bytes already there. */
        private void upgradeBuffers() {
            leaveHandshake();
            ByteBuffer newIn = ByteBuffer.allocateDirect(IN_BUFFER_BYTES);
            ByteBuffer newOut;
            try {
                newOut = ByteBuffer.allocateDirect(OUT_BUFFER_BYTES);
            } catch (Throwable t) {
                Mappings.unmap(newIn);
                throw t;
            }
            newIn.put(in.flip());
            newOut.put(out.flip());
            in = newIn;
            out = newOut;
        }

        private boolean hello() {
            if (in.remaining() < Wire.HELLO_BYTES) {
                return false;
            }
            int at = in.position();
            int version = in.getShort(at + 4);
            int flags = in.getShort(at + 6);
            boolean namesRealm = (flags & Wire.FLAG_REALM) != 0;
            // Version 2 knows no realm; 3 may name one. A HELLO that is none of these is refused as a bad version.
            boolean wellFormed = in.getInt(at) == Wire.MAGIC
                    && (version == Wire.VERSION || (version == Wire.VERSION_WITHOUT_REALM && !namesRealm));
            int realmLength = 0;
            if (wellFormed && namesRealm) {
                if (in.remaining() < Wire.HELLO_BYTES + 1) {
                    return false;
                }
                realmLength = in.get(at + Wire.HELLO_BYTES) & 0xFF;
                if (realmLength == 0 || realmLength > Realms.MAX_BYTES) {
                    wellFormed = false;
                } else if (in.remaining() < Wire.HELLO_BYTES + 1 + realmLength) {
                    return false; // the handshake timeout bounds the wait; the input buffer holds the longest HELLO
                }
            }
            in.position(at + 8);
            clientNonce = new byte[Wire.NONCE_BYTES];
            in.get(clientNonce);
            serverNonce = Handshake.nonce();
            if (wellFormed && namesRealm) {
                in.get();
                realmBytes = new byte[realmLength];
                in.get(realmBytes);
                realm = decodeRealm(realmBytes);
                wellFormed = realm != null;
            }
            int status;
            if (!wellFormed) {
                status = Wire.HS_BAD_VERSION;
            } else if (secrets != null) {
                // Every connection names a realm and proves its secret; the verdict on the realm comes with the
                // proof's (WELCOME), so an unknown realm is answered where and as a wrong proof is.
                status = realm == null ? Wire.HS_REALM_REQUIRED
                        : (flags & Wire.FLAG_AUTH) == 0 ? Wire.HS_AUTH_MISMATCH : Wire.HS_OK;
            } else if (realm != null) {
                status = Wire.HS_REALM_UNSUPPORTED;
            } else if (((flags & Wire.FLAG_AUTH) != 0) != (secret != null)) {
                status = Wire.HS_AUTH_MISMATCH;
            } else {
                status = Wire.HS_OK;
            }
            out.putInt(Wire.MAGIC).putShort(Wire.VERSION).putShort((short) status).put(serverNonce);
            if (status != Wire.HS_OK) {
                refuseHandshake(status);
            } else {
                state = State.AWAIT_AUTH;
            }
            return true;
        }

        private boolean auth() {
            if (in.remaining() < Wire.AUTH_BYTES) {
                return false;
            }
            byte[] key; // the secret the peer must prove it holds
            int status;
            if (secrets == null) {
                key = secret;
                boolean ok = secret == null
                        || Handshake.verify(Handshake.proof(secret, 'c', serverNonce, clientNonce), in);
                if (secret == null) {
                    in.position(in.position() + Wire.AUTH_BYTES);
                }
                status = ok ? Wire.HS_OK : Wire.HS_AUTH_FAILED;
            } else {
                key = secretOf(realm);
                if (key == null) {
                    Handshake.verifyUnknownRealm(in, serverNonce, clientNonce, realmBytes);
                    status = Wire.HS_UNKNOWN_REALM;
                } else {
                    boolean ok = Handshake.verify(Handshake.proof(key, 'c', serverNonce, clientNonce, realmBytes), in);
                    status = ok ? Wire.HS_OK : Wire.HS_AUTH_FAILED;
                }
            }
            boolean ok = status == Wire.HS_OK;
            out.putInt(status);
            out.put(ok ? Handshake.proof(key, 's', clientNonce, serverNonce, realmBytes) : new byte[Wire.PROOF_BYTES]);
            if (ok) {
                state = State.SERVING;
                clientNonce = null;
                serverNonce = null;
                realmBytes = null;
            } else {
                refuseHandshake(status);
            }
            return true;
        }

        /** The secret of {@code name} the resolver gives, or null for a realm it does not know (or fails on). */
        private byte[] secretOf(String name) {
            try {
                byte[] k = secrets.secretOf(name);
                return k == null || k.length == 0 ? null : k;
            } catch (RuntimeException e) {
                errorLog.warn("the secret resolver failed for realm {} (a connection from {}, refused as of an "
                        + "unknown realm): {}", Realms.printable(name), remote, e.toString());
                return null;
            }
        }

        /** The handshake failed: its slot goes back now; the refusal is written, then the connection drains. */
        private void refuseHandshake(int status) {
            connectionsRefused++;
            handshakeLog.warn("refused connection from {}: {}{}", remote, Wire.handshakeStatus(status),
                    realm == null ? "" : " (realm " + Realms.printable(realm) + ")");
            clientNonce = null;
            serverNonce = null;
            realmBytes = null;
            leaveHandshake();
            closeAfterFlush = true;
        }

        private void leaveHandshake() {
            inHandshake = false;
            handshaking--;
            if (source != null) {
                source.handshaking--;
            }
        }

        private boolean request() {
            if (in.remaining() < Wire.REQUEST_HEADER_BYTES) {
                return false;
            }
            byte op = in.get();
            in.position(in.position() + 3);
            int requestId = in.getInt();
            int length = in.getInt();
            int rkey = in.getInt();
            long address = in.getLong();
            if (op == Wire.OP_READ) {
                serveRead(requestId, rkey, address, length);
            } else if (op == Wire.OP_CONTROL) {
                if (length < 0 || length > limits.maxControlBytes()) {
                    limitLog.warn("closing connection from {}: control message of {} bytes claimed, limit "
                            + "spark.shuffle.rdma.maxControlMessageSize={}", remote, length & 0xFFFFFFFFL,
                            limits.maxControlBytes());
                    malformed(requestId);
                } else if (length == 0) {
                    // A keep-alive: answered at once, never shown to the handler.
                    out.put(Wire.OP_CONTROL_REPLY).put((byte) ReadStatus.SUCCESS).putShort((short) 0)
                            .putInt(requestId).putInt(0);
                } else {
                    // The body's buffer grows with the bytes that arrive, never ahead of them.
                    control = ByteBuffer.allocate(Math.min(length, CONTROL_INITIAL_BYTES));
                    controlLength = length;
                    controlRequestId = requestId;
                    state = State.CONTROL_BODY;
                }
            } else {
                malformed(requestId);
            }
            return true;
        }

        private void malformed(int requestId) {
            out.put(Wire.OP_ERROR).put((byte) ReadStatus.MALFORMED_REQUEST).putShort((short) 0)
                    .putInt(requestId).putInt(0);
            readsRefused++;
            closeAfterFlush = true;
            LOG.debug("malformed request from {}; closing after the error reply", remote);
        }

        private void serveRead(int requestId, int rkey, long address, int length) {
            TcpRegion r = table.get(rkey);
            int status;
            long offset = 0;
            if (r == null || !readable(r)) {
                status = ReadStatus.UNKNOWN_KEY; // another realm's region is not there, as far as this peer can tell
            } else if (r.access != RegionAccess.REMOTE_READ) {
                status = ReadStatus.ACCESS_DENIED;
            } else if (length <= 0) {
                status = ReadStatus.INVALID_LENGTH;
            } else {
                offset = address - r.base;
                if (address < r.base || offset > r.length || length > r.length - offset) {
                    status = ReadStatus.OUT_OF_BOUNDS;
                } else if (!r.tryUse()) {
                    status = ReadStatus.UNKNOWN_KEY;
                } else {
                    status = ReadStatus.SUCCESS;
                }
            }
            if (status != ReadStatus.SUCCESS) {
                out.put(Wire.OP_READ_REPLY).put((byte) status).putShort((short) 0).putInt(requestId).putInt(0);
                readsRefused++;
                return;
            }
            out.put(Wire.OP_READ_REPLY).put((byte) 0).putShort((short) 0).putInt(requestId).putInt(length);
            readsServed++;
            bytesServed += length;
            if (length <= INLINE_PAYLOAD_BYTES) {
                try {
                    r.copyTo(out, (int) offset, length);
                } finally {
                    r.unuse();
                }
            } else {
                try {
                    payload = r.borrowServeView((int) offset, length);
                } catch (Throwable t) {
                    r.unuse();
                    throw t;
                }
                payloadRegion = r;
                payloadSinceNanos = System.nanoTime();
            }
        }

        /**
         * Whether this connection may READ {@code r}: always, on a node without secrets per realm; there, only
         * a region of the realm it authenticated for. No allocation.
         */
        private boolean readable(TcpRegion r) {
            if (secrets == null) {
                return true;
            }
            String of = r.realm;
            return of != null && (of == realm || of.equals(realm));
        }

        private boolean controlBody() {
            for (;;) {
                int n = Math.min(in.remaining(), control.remaining());
                if (n > 0) {
                    int lim = in.limit();
                    in.limit(in.position() + n);
                    control.put(in);
                    in.limit(lim);
                }
                if (control.position() == controlLength) {
                    break;
                }
                if (!in.hasRemaining()) {
                    return false;
                }
                // Full but more is coming and has arrived: grow, at most to the claimed length.
                ByteBuffer bigger = ByteBuffer.allocate((int) Math.min(controlLength, 2L * control.capacity()));
                control.flip();
                bigger.put(control);
                control = bigger;
            }
            control.flip();
            ByteBuffer reply;
            int status = ReadStatus.SUCCESS;
            try {
                reply = handler.onMessage(realm, control.asReadOnlyBuffer());
            } catch (Throwable e) {
                errorLog.warn("control handler failed for a message from {}: {}", remote, e.toString());
                LOG.debug("the handler's failure", e);
                reply = null;
                status = ReadStatus.HANDLER_FAILED;
            }
            int len = reply == null ? 0 : reply.remaining();
            if (len > limits.maxControlBytes()) {
                LOG.warn("control reply of {} bytes exceeds spark.shuffle.rdma.maxControlMessageSize", len);
                status = ReadStatus.HANDLER_FAILED;
                len = 0;
                reply = null;
            }
            out.put(Wire.OP_CONTROL_REPLY).put((byte) status).putShort((short) 0).putInt(controlRequestId).putInt(len);
            if (reply != null && len > 0) {
                if (len <= out.remaining() && len <= INLINE_PAYLOAD_BYTES) {
                    out.put(reply.duplicate());
                } else {
                    payload = reply.duplicate();
                    payloadRegion = null;
                    payloadSinceNanos = System.nanoTime();
                }
            }
            control = null;
            state = State.SERVING;
            return true;
        }

        /**
         * Closes with a reset, for a connection closed at a limit: what the kernel still holds for the
         * peer (a reply it is not reading) is dropped at once instead of trickling out.
         */
        void abort() {
            try {
                ch.socket().setSoLinger(true, 0);
            } catch (Throwable t) {
                LOG.debug("setting linger on {}", remote, t);
            }
            close();
        }

        void close() {
            if (state == State.CLOSED) {
                return;
            }
            if (inHandshake) {
                leaveHandshake();
            }
            if (state == State.DRAINING) {
                draining--;
            }
            state = State.CLOSED;
            control = null;
            connections.remove(this);
            connectionCount = connections.size();
            if (source != null && --source.connections == 0) {
                sources.remove(source.address, source);
            }
            try {
                if (payload != null) {
                    releasePayload();
                }
            } finally {
                try {
                    if (key != null) {
                        key.cancel();
                    }
                    ch.close();
                } catch (Throwable t) {
                    LOG.debug("closing {}", remote, t);
                } finally {
                    // Nothing uses these buffers any more: this connection is off the list and its key cancelled.
                    releaseBuffers();
                }
            }
        }

        /** Direct memory goes back now, not when the garbage collector gets to it. */
        private void releaseBuffers() {
            ByteBuffer i = in;
            ByteBuffer o = out;
            in = EMPTY;
            out = EMPTY;
            if (i.isDirect()) {
                Mappings.unmap(i);
            }
            if (o.isDirect()) {
                Mappings.unmap(o);
            }
        }
    }
}
