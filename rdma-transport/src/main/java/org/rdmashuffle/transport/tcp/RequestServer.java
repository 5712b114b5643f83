package org.rdmashuffle.transport.tcp;

import static org.rdmashuffle.transport.tcp.TcpResponder.LOG;

import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.BiConsumer;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;

/**
 * Serving a handshaken connection's requests: a READ is answered from the registration table after its
 * rkey, realm, access and bounds are checked (inline up to {@link ServedConnection#INLINE_PAYLOAD_BYTES},
 * else as a view of the region the connection borrows until it is written); a control message's body is
 * gathered into a buffer that grows with the bytes that arrive and handed to the node's handler; an
 * empty control message is a keep-alive, answered at once. A handler's reply that is not ready when it returns
 * ({@link ControlHandler#onMessageAsync}) comes back through the responder's queue ({@link PendingControl}); its
 * connection waits in {@link ServedConnection.State#CONTROL_PENDING} meanwhile. No allocation per READ; one
 * future per control message (and one {@link PendingControl} when its reply comes later). Responder thread only,
 * except {@link PendingControl#accept}.
 */
final class RequestServer {
    /** A control body's buffer starts this small and doubles as bytes arrive, up to the claimed length. */
    private static final int CONTROL_INITIAL_BYTES = 1024;

    private final TcpResponder responder;
    private final RegionTable table;
    private final ControlHandler handler;
    private final int maxControlBytes;
    /** A node with secrets per realm: a connection READs only its realm's regions. */
    private final boolean realms;

    RequestServer(TcpResponder responder, RegionTable table, ControlHandler handler, boolean realms) {
        this.responder = responder;
        this.table = table;
        this.handler = handler;
        this.maxControlBytes = responder.limits.maxControlBytes();
        this.realms = realms;
    }

    /** Parses one request header from {@code c.in} and answers or starts it; false when it has not all arrived. */
    boolean request(ServedConnection c) {
        ByteBuffer in = c.in;
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
            serveRead(c, requestId, rkey, address, length);
        } else if (op == Wire.OP_CONTROL) {
            if (length < 0 || length > maxControlBytes) {
                responder.limitLog.warn("closing connection from {}: control message of {} bytes claimed, limit {}={}",
                        c.remote, length & 0xFFFFFFFFL, responder.limits.keys().maxControlMessageSize, maxControlBytes);
                malformed(c, requestId);
            } else if (length == 0) {
                // A keep-alive: answered at once, never shown to the handler.
                c.out.put(Wire.OP_CONTROL_REPLY).put((byte) ReadStatus.SUCCESS).putShort((short) 0)
                        .putInt(requestId).putInt(0);
            } else {
                // The body's buffer grows with the bytes that arrive, never ahead of them.
                c.control = ByteBuffer.allocate(Math.min(length, CONTROL_INITIAL_BYTES));
                c.controlLength = length;
                c.controlRequestId = requestId;
                c.state = ServedConnection.State.CONTROL_BODY;
            }
        } else {
            malformed(c, requestId);
        }
        return true;
    }

    private void malformed(ServedConnection c, int requestId) {
        c.out.put(Wire.OP_ERROR).put((byte) ReadStatus.MALFORMED_REQUEST).putShort((short) 0)
                .putInt(requestId).putInt(0);
        responder.readsRefused++;
        c.closeAfterFlush = true;
        LOG.debug("malformed request from {}; closing after the error reply", c.remote);
    }

    private void serveRead(ServedConnection c, int requestId, int rkey, long address, int length) {
        TcpRegion r = table.get(rkey);
        ByteBuffer out = c.out;
        int status;
        long offset = 0;
        if (r == null || !readable(c, r)) {
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
            responder.readsRefused++;
            return;
        }
        out.put(Wire.OP_READ_REPLY).put((byte) 0).putShort((short) 0).putInt(requestId).putInt(length);
        responder.readsServed++;
        responder.bytesServed += length;
        if (length <= ServedConnection.INLINE_PAYLOAD_BYTES) {
            try {
                r.copyTo(out, (int) offset, length);
            } finally {
                r.unuse();
            }
        } else {
            try {
                c.payload = r.borrowServeView((int) offset, length);
            } catch (Throwable t) {
                r.unuse();
                throw t;
            }
            c.payloadRegion = r;
            c.payloadSinceNanos = System.nanoTime();
        }
    }

    /**
     * Whether {@code c} may READ {@code r}: always, on a node without secrets per realm; there, only
     * a region of the realm it authenticated for. No allocation.
     */
    private boolean readable(ServedConnection c, TcpRegion r) {
        if (!realms) {
            return true;
        }
        String of = r.realm;
        return of != null && (of == c.realm || of.equals(c.realm));
    }

    /** Gathers a control body from {@code c.in}; once complete, answers it; false when more must arrive. */
    boolean controlBody(ServedConnection c) {
        ByteBuffer in = c.in;
        ByteBuffer control = c.control;
        for (;;) {
            int n = Math.min(in.remaining(), control.remaining());
            if (n > 0) {
                int lim = in.limit();
                in.limit(in.position() + n);
                control.put(in);
                in.limit(lim);
            }
            if (control.position() == c.controlLength) {
                break;
            }
            if (!in.hasRemaining()) {
                return false;
            }
            // Full but more is coming and has arrived: grow, at most to the claimed length.
            ByteBuffer bigger = ByteBuffer.allocate((int) Math.min(c.controlLength, 2L * control.capacity()));
            control.flip();
            bigger.put(control);
            control = bigger;
            c.control = bigger;
        }
        control.flip();
        c.control = null;
        CompletableFuture<ByteBuffer> future;
        try {
            future = handler.onMessageAsync(c.realm, control.asReadOnlyBuffer());
            if (future == null) {
                future = CompletableFuture.failedFuture(new NullPointerException("the handler returned no future"));
            }
        } catch (Throwable e) { // a handler that overrides onMessageAsync and throws instead of failing its future
            future = CompletableFuture.failedFuture(e);
        }
        if (!future.isDone()) {
            // Answered later: this connection parses nothing more until the reply is written (ServedConnection).
            PendingControl pending = new PendingControl(responder, c, c.controlRequestId);
            c.pendingControl = pending;
            c.state = ServedConnection.State.CONTROL_PENDING;
            future.whenComplete(pending);
            return true;
        }
        ByteBuffer reply = null;
        Throwable failure = null;
        try {
            reply = future.getNow(null);
        } catch (Throwable e) {
            failure = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
        }
        reply(c, c.controlRequestId, reply, failure);
        return true;
    }

    /**
     * Queues the reply to control request {@code requestId} of {@code c} (the handler's failure when
     * {@code failure} is not null) and goes back to serving. {@code c.out} has room for a header and an inline
     * payload: the parse that started the request checked it, and nothing was queued since.
     */
    private void reply(ServedConnection c, int requestId, ByteBuffer reply, Throwable failure) {
        int status = ReadStatus.SUCCESS;
        if (failure != null) {
            responder.errorLog.warn("control handler failed for a message from {}: {}", c.remote, failure.toString());
            LOG.debug("the handler's failure", failure);
            reply = null;
            status = ReadStatus.HANDLER_FAILED;
        }
        int len = reply == null ? 0 : reply.remaining();
        if (len > maxControlBytes) {
            responder.errorLog.warn("control reply of {} bytes to {} exceeds {}={}", len, c.remote,
                    responder.limits.keys().maxControlMessageSize, maxControlBytes);
            status = ReadStatus.HANDLER_FAILED;
            len = 0;
            reply = null;
        }
        ByteBuffer out = c.out;
        out.put(Wire.OP_CONTROL_REPLY).put((byte) status).putShort((short) 0).putInt(requestId).putInt(len);
        if (reply != null && len > 0) {
            if (len <= out.remaining() && len <= ServedConnection.INLINE_PAYLOAD_BYTES) {
                out.put(reply.duplicate());
            } else {
                c.payload = reply.duplicate();
                c.payloadRegion = null;
                c.payloadSinceNanos = System.nanoTime();
            }
        }
        c.state = ServedConnection.State.SERVING;
    }

    /**
     * Writes the reply {@code p} carries, if its connection still waits for it (not closed since); responder
     * thread only. The connection then goes on parsing what it sent meanwhile.
     *
     * @return whether the reply was queued on its connection
     */
    boolean deliver(PendingControl p) {
        ServedConnection c = p.connection;
        if (c.pendingControl != p || c.state != ServedConnection.State.CONTROL_PENDING) {
            return false; // closed meanwhile: the reply is dropped
        }
        c.pendingControl = null;
        reply(c, p.requestId, p.reply, p.failure);
        return true;
    }

    /**
     * One control request answered later: what the handler's future completes with, handed from whichever thread
     * completes it to the responder's queue ({@link TcpResponder#controlReplyReady}); the only thing the completing
     * thread touches. One per control message whose reply is not ready when the handler returns.
     */
    static final class PendingControl implements BiConsumer<ByteBuffer, Throwable> {
        private final TcpResponder responder;
        final ServedConnection connection;
        final int requestId;
        /** Written by the completing thread before the queue hands this to the responder thread. */
        ByteBuffer reply;
        Throwable failure;

        PendingControl(TcpResponder responder, ServedConnection connection, int requestId) {
            this.responder = responder;
            this.connection = connection;
            this.requestId = requestId;
        }

        @Override
        public void accept(ByteBuffer r, Throwable f) {
            reply = r;
            failure = f instanceof CompletionException && f.getCause() != null ? f.getCause() : f;
            responder.controlReplyReady(this);
        }
    }
}
