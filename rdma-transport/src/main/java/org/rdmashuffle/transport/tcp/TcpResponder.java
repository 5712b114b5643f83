package org.rdmashuffle.transport.tcp;

import java.io.IOException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.util.ArrayList;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.RateLimitedLog;
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
 * <p>This class is the loop; its pieces each do one job, all on this one thread:
 * {@link ConnectionAdmission} accepts connections and keeps the limits (and picks what to evict),
 * {@link ServedConnection} frames one connection's input and output, {@link ResponderHandshake} answers
 * HELLO and AUTH, {@link RequestServer} serves READs and control messages, {@link ConnectionDrain}
 * discards what a peer sends after an error reply.
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
 *
 * <p>Control replies that come later: a handler may answer a control message with a future that completes on
 * another thread ({@link ControlHandler#onMessageAsync}), so that work which may block (a disk, a lock) never runs
 * here. The completing thread only queues the reply ({@link #controlReplyReady}) and wakes the selector; this
 * thread writes it and resumes its connection, which parsed nothing meanwhile. A reply whose connection closed,
 * or that comes once the loop has ended, is dropped.
 */
final class TcpResponder implements Runnable {
    /** The one logger of every piece of the responder, so operators find its lines under one name. */
    static final Logger LOG = LoggerFactory.getLogger(TcpResponder.class);
    /** Input buffer of a handshaken connection: requests are 24 bytes, so this holds hundreds. */
    static final int IN_BUFFER_BYTES = 16 << 10;
    /** Output buffer of a handshaken connection: reply headers and inline payloads. */
    static final int OUT_BUFFER_BYTES = 64 << 10;
    /** Heap output buffer of a connection before its handshake completes (no direct memory until then). */
    static final int HANDSHAKE_BUFFER_BYTES = 64;
    /** Heap input buffer of a connection before its handshake completes: the longest HELLO and the AUTH. */
    static final int HANDSHAKE_IN_BUFFER_BYTES = Wire.MAX_HELLO_BYTES + Wire.AUTH_BYTES;
    private static final long EXPIRY_CHECK_NANOS = 100_000_000L;
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

    /** What one peer can make this node hold, and the names of those keys as the node's configuration was read. */
    record Limits(int maxConnections, int maxConnectionsPerAddress, int maxHandshaking, int maxControlBytes,
                  long handshakeTimeoutMs, long idleTimeoutMs, long frameTimeoutMs, int maxConnectionsPerRealm,
                  KeyNames keys) {
        static Limits from(RdmaShuffleConf conf, KeyNames keys) {
            return new Limits(conf.maxConnections(), conf.maxConnectionsPerAddress(), conf.maxHandshakingConnections(),
                    conf.maxControlMessageSizeBytes(), conf.connectTimeoutMs(), conf.idleTimeoutMs(),
                    conf.frameTimeoutMs(), conf.maxConnectionsPerRealm(), keys);
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

    private final TcpNode node;
    private final Selector selector;
    final Limits limits;
    /** IP_TOS for accepted sockets, or -1 for the kernel's default. */
    final int ipTos;
    final long handshakeTimeoutNanos;
    final long idleTimeoutNanos;
    final long frameTimeoutNanos;
    final ConnectionAdmission admission;
    final ResponderHandshake handshake;
    final RequestServer requests;
    final ConnectionDrain drain;
    /** Connections that stopped at their budget with work left, served again next wakeup (no allocation once grown). */
    private ArrayList<ServedConnection> carried = new ArrayList<>();
    private ArrayList<ServedConnection> carriedSpare = new ArrayList<>();
    private final java.util.function.Consumer<SelectionKey> onKey = this::service;
    /**
     * Control replies completed on other threads, for this thread to write: at most one per connection (its
     * pending one), so bounded by the connections.
     */
    private final ConcurrentLinkedQueue<RequestServer.PendingControl> controlReplies = new ConcurrentLinkedQueue<>();
    /** False once the loop has ended (or is ending): a control reply completed then is dropped, not queued. */
    private volatile boolean takingReplies = true;
    /** One window per kind of line, so a flood of one kind hides no other. */
    final RateLimitedLog limitLog = new RateLimitedLog(LOG, 10_000);
    final RateLimitedLog errorLog = new RateLimitedLog(LOG, 10_000);
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
    /** Handshaken connections closed at {@code maxConnections} for a newcomer, having been silent longest. */
    volatile long connectionsEvictedIdle;
    volatile int connectionCount;

    TcpResponder(TcpNode node, ServerSocketChannel server, RegionTable table, ControlHandler handler, byte[] secret,
                 SecretResolver secrets, Limits limits) throws IOException {
        this.node = node;
        this.limits = limits;
        this.ipTos = node.ipTos();
        this.handshakeTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(limits.handshakeTimeoutMs());
        this.idleTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(limits.idleTimeoutMs());
        this.frameTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(limits.frameTimeoutMs());
        this.handshake = new ResponderHandshake(this, secret, secrets);
        this.requests = new RequestServer(this, table, handler, secrets != null);
        this.drain = new ConnectionDrain(this);
        Selector sel = Selector.open();
        try {
            server.configureBlocking(false);
            server.register(sel, SelectionKey.OP_ACCEPT);
        } catch (IOException | RuntimeException e) {
            sel.close();
            drain.release();
            throw e;
        }
        this.selector = sel;
        this.admission = new ConnectionAdmission(this, server, sel);
    }

    void stop() {
        running = false;
        takingReplies = false;
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
                deliverControlReplies();
                serveCarried();
                long now = System.nanoTime();
                if (now - lastExpiryCheck > EXPIRY_CHECK_NANOS) {
                    lastExpiryCheck = now;
                    admission.expire(now);
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
        takingReplies = false;
        controlReplies.clear();
        admission.closeAll();
        try {
            selector.close();
        } catch (IOException e) {
            LOG.debug("closing selector", e);
        }
        carried.clear();
        carriedSpare.clear();
        drain.release();
    }

    /**
     * A control reply completed on another thread (any thread; it does nothing else here): queued for this
     * thread, which is woken. Dropped once the loop has ended.
     */
    void controlReplyReady(RequestServer.PendingControl p) {
        if (!takingReplies) {
            return;
        }
        controlReplies.add(p);
        if (!takingReplies) {
            controlReplies.remove(p); // the loop ended meanwhile: nobody takes it (releaseAll may have cleared before)
            return;
        }
        selector.wakeup();
    }

    /** Writes the control replies completed since the last wakeup; their connections are served in this one. */
    private void deliverControlReplies() {
        RequestServer.PendingControl p;
        while ((p = controlReplies.poll()) != null) {
            ServedConnection c = p.connection;
            try {
                if (requests.deliver(p)) {
                    c.carryOver(); // resumes: writes the reply, then parses what the peer sent meanwhile
                }
            } catch (Throwable t) {
                errorLog.warn("closing connection from {} after an unexpected error: {}", c.remote, t.toString());
                LOG.debug("the error", t);
                c.close();
            }
        }
    }

    /** Serves the connections carried over from the last wakeup that have not had their turn in this one. */
    private void serveCarried() {
        if (carried.isEmpty()) {
            return;
        }
        ArrayList<ServedConnection> due = carried;
        carried = carriedSpare;
        carriedSpare = due;
        for (int i = 0; i < due.size(); i++) {
            ServedConnection c = due.get(i);
            if (c.isClosed()) {
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

    /** Serves {@code c} again in the next wakeup: it stopped at its budget with work perhaps left. */
    void carry(ServedConnection c) {
        carried.add(c);
    }

    private void service(SelectionKey k) {
        if (!k.isValid()) {
            return;
        }
        if (k.isAcceptable()) {
            try {
                admission.accept();
            } catch (Throwable t) {
                errorLog.warn("accepting a connection failed: {}", t.toString());
            }
            return;
        }
        serve((ServedConnection) k.attachment());
    }

    /** One connection's turn in this wakeup, within its budget (also asked by the admission before an eviction). */
    void serve(ServedConnection c) {
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

    int connectionCount() {
        return connectionCount;
    }
}
