package org.rdmashuffle.transport.tcp;

import static org.rdmashuffle.transport.tcp.TcpResponder.LOG;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.SocketChannel;
import org.rdmashuffle.transport.Mappings;

/**
 * One accepted connection of the responder and its framing: reading requests into its input buffer
 * within the turn's budget, handing complete frames to the handshake or the request server, and writing
 * reply headers and payloads from its output buffer. Everything here belongs to this connection alone
 * (buffers, the pending payload, a partly received frame); touched by the responder thread only.
 */
final class ServedConnection {
    /** Payloads up to this size are copied next to their header; larger ones are written from the region. */
    static final int INLINE_PAYLOAD_BYTES = 8192;
    private static final ByteBuffer EMPTY = ByteBuffer.allocate(0);

    /**
     * Connection states: AWAIT_HELLO → AWAIT_AUTH → SERVING → CONTROL_BODY → SERVING (the handler answered at
     * once) or CONTROL_PENDING (its reply comes later) → SERVING (the reply queued); any → DRAINING (after an
     * error reply: output shut down, input discarded until the peer closes, so the reply is not lost to
     * a reset) → CLOSED.
     *
     * <p>In CONTROL_PENDING nothing is parsed: what the peer sends meanwhile is read into the input buffer until
     * it is full, then not at all (the socket's buffers hold the rest, and the peer's writes wait), so a peer
     * flooding requests makes the node hold one input buffer, and replies keep the order of the requests.
     */
    enum State { AWAIT_HELLO, AWAIT_AUTH, SERVING, CONTROL_BODY, CONTROL_PENDING, DRAINING, CLOSED }

    private final TcpResponder responder;
    private final ConnectionAdmission admission;
    final SocketChannel ch;
    final String remote;
    /** Its source address's count, or null when the address is unknown. */
    final ConnectionAdmission.Source source;
    final long acceptedNanos = System.nanoTime();
    /** Holds a handshake slot: accepted, and the handshake neither done nor refused. */
    boolean inHandshake = true;
    /**
     * Admitted past {@code maxConnections} on a node with a secret: an idle connection goes for it once it
     * proves the secret ({@link ConnectionAdmission#roomForAuthenticated}), not before.
     */
    boolean owesRoom;
    /** Small heap buffers until the handshake succeeds, then direct ones. */
    ByteBuffer in = ByteBuffer.allocate(TcpResponder.HANDSHAKE_IN_BUFFER_BYTES);
    ByteBuffer out = ByteBuffer.allocate(TcpResponder.HANDSHAKE_BUFFER_BYTES);
    private final ByteBuffer[] gather = new ByteBuffer[2];
    SelectionKey key;
    State state = State.AWAIT_HELLO;
    /** The pending reply's payload: a view owned by this reply ({@code payloadRegion}'s) or a control reply. */
    ByteBuffer payload;
    TcpRegion payloadRegion;
    ByteBuffer control;
    int controlLength;
    int controlRequestId;
    /** In CONTROL_PENDING: the reply this connection waits for (a delivery of any other is dropped). */
    RequestServer.PendingControl pendingControl;
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
    private long partialSinceNanos;
    /** The last parse stopped for want of input (not for want of room to reply). */
    private boolean starved;
    /** Interest set last given to the key. */
    private int interestOps = SelectionKey.OP_READ;
    /** Bytes read and written in the current turn, against the budgets. */
    int readThisTurn;
    private long writtenThisTurn;
    /** Bytes discarded since the error reply. */
    long drainedBytes;
    /** The wakeup of the loop that last served it. */
    long servicedRound;
    /** On the list of connections carried to the next wakeup. */
    boolean carriedOver;
    /**
     * Handshaken and not draining: on the admission's activity list, between {@code lessActive} and
     * {@code moreActive}; {@code lastActiveNanos} is when it last parsed a request or wrote reply bytes.
     */
    boolean inActivityList;
    ServedConnection lessActive;
    ServedConnection moreActive;
    long lastActiveNanos;

    ServedConnection(TcpResponder responder, SocketChannel ch, ConnectionAdmission.Source source) {
        this.responder = responder;
        this.admission = responder.admission;
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

    boolean isClosed() {
        return state == State.CLOSED;
    }

    boolean isDraining() {
        return state == State.DRAINING;
    }

    /** Reply bytes are owed to the peer: queued in {@code out}, a payload being written, or an error reply to flush. */
    boolean replyPending() {
        return payload != null || out.position() > 0 || closeAfterFlush || state == State.CONTROL_PENDING;
    }

    /** Why this connection must close now, or null. */
    String expiry(long now) {
        switch (state) {
            case DRAINING:
                return now - drainSinceNanos > responder.handshakeTimeoutNanos
                        ? "peer did not close after an error reply" : null;
            case AWAIT_HELLO, AWAIT_AUTH:
                return now - acceptedNanos > responder.handshakeTimeoutNanos
                        ? responder.limits.keys().noHandshake : null;
            case CLOSED:
                return null;
            case CONTROL_PENDING:
                // The node's own handler has not answered: no frame deadline, and no peer to blame for silence;
                // a handler that never answers still frees the connection after the idle timeout.
                return now - lastProgressNanos > responder.idleTimeoutNanos
                        ? responder.limits.keys().controlReplyLate : null;
            default:
                if (partialSinceNanos != 0 && now - partialSinceNanos > responder.frameTimeoutNanos) {
                    return responder.limits.keys().frameLate;
                }
                if (payload != null && now - payloadSinceNanos > responder.idleTimeoutNanos) {
                    return responder.limits.keys().replyUnread;
                }
                if (now - lastProgressNanos > responder.idleTimeoutNanos) {
                    return payload != null || out.position() > 0 ? responder.limits.keys().idleNotReading
                            : responder.limits.keys().idle;
                }
                return null;
        }
    }

    /** One turn: at most {@link TcpResponder#READ_BUDGET_BYTES} read and about {@link TcpResponder#WRITE_BUDGET_BYTES} written. */
    void service() throws IOException {
        readThisTurn = 0;
        writtenThisTurn = 0;
        if (state == State.DRAINING) {
            responder.drain.drain(this);
            return;
        }
        for (;;) {
            if (!flush()) {
                interest(SelectionKey.OP_WRITE);
                return;
            }
            if (closeAfterFlush) {
                responder.drain.start(this);
                if (state == State.DRAINING) {
                    responder.drain.drain(this);
                }
                return;
            }
            if (writtenThisTurn >= TcpResponder.WRITE_BUDGET_BYTES) {
                carryOver();
                return;
            }
            if (parse()) {
                continue;
            }
            if (readThisTurn >= TcpResponder.READ_BUDGET_BYTES) {
                carryOver();
                return;
            }
            if (state == State.CONTROL_PENDING && !in.hasRemaining()) {
                // Nothing more is read until the reply resumes parsing (RequestServer.deliver, then carryOver).
                interest(0);
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
    void carryOver() {
        interest(SelectionKey.OP_READ);
        if (!carriedOver) {
            carriedOver = true;
            responder.carry(this);
        }
    }

    void interest(int ops) {
        if (interestOps != ops) {
            key.interestOps(ops);
            interestOps = ops;
        }
    }

    private void notePartialFrame() {
        boolean partial = starved && state != State.CONTROL_PENDING
                && (in.position() > 0 || state == State.CONTROL_BODY);
        if (!partial) {
            partialSinceNanos = 0;
        } else if (partialSinceNanos == 0) {
            partialSinceNanos = System.nanoTime();
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
            if (inActivityList) {
                admission.active(this, lastProgressNanos);
            }
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
                    case AWAIT_HELLO -> responder.handshake.hello(this);
                    case AWAIT_AUTH -> responder.handshake.auth(this);
                    case SERVING -> responder.requests.request(this);
                    case CONTROL_BODY -> responder.requests.controlBody(this);
                    case CONTROL_PENDING, DRAINING, CLOSED -> false;
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
            if (inActivityList) {
                admission.active(this, System.nanoTime());
            }
        }
        if (state == State.SERVING && !in.isDirect()) {
            upgradeBuffers();
        }
        return progressed;
    }

    /** After the handshake: the direct buffers that serving needs, carrying over any bytes already there. */
    private void upgradeBuffers() {
        admission.leaveHandshake(this);
        ByteBuffer newIn = ByteBuffer.allocateDirect(TcpResponder.IN_BUFFER_BYTES);
        ByteBuffer newOut;
        try {
            newOut = ByteBuffer.allocateDirect(TcpResponder.OUT_BUFFER_BYTES);
        } catch (Throwable t) {
            Mappings.unmap(newIn);
            throw t;
        }
        newIn.put(in.flip());
        newOut.put(out.flip());
        in = newIn;
        out = newOut;
        admission.handshaken(this, System.nanoTime());
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
            admission.leaveHandshake(this);
        }
        if (state == State.DRAINING) {
            admission.draining--;
        }
        state = State.CLOSED;
        control = null;
        pendingControl = null; // a reply that comes later finds it closed and is dropped
        admission.closed(this);
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
    void releaseBuffers() {
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
