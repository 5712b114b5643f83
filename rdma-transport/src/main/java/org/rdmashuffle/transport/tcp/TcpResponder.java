package org.rdmashuffle.transport.tcp;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The serving side of a tcp node: one thread that accepts connections and answers READ requests
 * from the registration table, sending payload straight from registered memory (direct buffers and
 * mapped files) to the socket. Requests on a connection are pipelined and answered in order. A bad
 * request gets an error reply and the connection goes on; an unparseable frame gets an error reply
 * and the connection is closed. This is the only thread of a node that runs per remote READ.
 */
final class TcpResponder implements Runnable {
    private static final Logger LOG = LoggerFactory.getLogger(TcpResponder.class);
    /** Payloads up to this size are copied next to their header; larger ones are written from the region. */
    private static final int INLINE_PAYLOAD_BYTES = 8192;
    private static final int IO_BUFFER_BYTES = 64 << 10;

    private final TcpNode node;
    private final ServerSocketChannel server;
    private final Selector selector;
    private final RegionTable table;
    private final ControlHandler handler;
    private final byte[] secret;
    private final int maxControlBytes;
    private final long handshakeTimeoutNanos;
    private final List<Connection> connections = new ArrayList<>();
    private final java.util.function.Consumer<SelectionKey> onKey = this::service;
    private long lastExpiryCheck = System.nanoTime();
    private volatile boolean running = true;

    // Written by the responder thread only.
    volatile long readsServed;
    volatile long readsRefused;
    volatile long bytesServed;

    TcpResponder(TcpNode node, ServerSocketChannel server, RegionTable table, ControlHandler handler, byte[] secret,
                 int maxControlBytes, long handshakeTimeoutMs) throws IOException {
        this.node = node;
        this.server = server;
        this.table = table;
        this.handler = handler;
        this.secret = secret;
        this.maxControlBytes = maxControlBytes;
        this.handshakeTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(handshakeTimeoutMs);
        this.selector = Selector.open();
        server.configureBlocking(false);
        server.register(selector, SelectionKey.OP_ACCEPT);
    }

    void stop() {
        running = false;
        selector.wakeup();
    }

    @Override
    public void run() {
        try {
            while (running) {
                selector.select(onKey, 100);
                long now = System.nanoTime();
                if (now - lastExpiryCheck > 100_000_000L) {
                    lastExpiryCheck = now;
                    expireHandshakes();
                }
            }
        } catch (IOException | RuntimeException e) {
            if (running) {
                LOG.error("tcp responder of {} stopped by an error", node.localAddress(), e);
            }
        } finally {
            for (Connection c : new ArrayList<>(connections)) {
                c.close();
            }
            try {
                selector.close();
            } catch (IOException e) {
                LOG.debug("closing selector", e);
            }
        }
    }

    private void service(SelectionKey k) {
        if (!k.isValid()) {
            return;
        }
        if (k.isAcceptable()) {
            try {
                accept();
            } catch (IOException e) {
                LOG.warn("accepting a connection failed", e);
            }
            return;
        }
        Connection c = (Connection) k.attachment();
        try {
            c.service();
        } catch (IOException | RuntimeException e) {
            LOG.debug("closing connection from {}: {}", c.remote, e.toString());
            c.close();
        }
    }

    private void accept() throws IOException {
        SocketChannel ch;
        while ((ch = server.accept()) != null) {
            ch.configureBlocking(false);
            ch.socket().setTcpNoDelay(true);
            Connection c = new Connection(ch);
            c.key = ch.register(selector, SelectionKey.OP_READ, c);
            connections.add(c);
        }
    }

    private void expireHandshakes() {
        long now = System.nanoTime();
        for (int i = connections.size() - 1; i >= 0; i--) {
            Connection c = connections.get(i);
            if (c.state == State.DRAINING && now - c.drainSinceNanos > handshakeTimeoutNanos) {
                c.close();
            } else if ((c.state == State.AWAIT_HELLO || c.state == State.AWAIT_AUTH)
                    && now - c.acceptedNanos > handshakeTimeoutNanos) {
                LOG.debug("closing connection from {}: no handshake within the connect timeout", c.remote);
                c.close();
            }
        }
    }

    int connectionCount() {
        return connections.size();
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
        final long acceptedNanos = System.nanoTime();
        final ByteBuffer in = ByteBuffer.allocateDirect(IO_BUFFER_BYTES);
        final ByteBuffer out = ByteBuffer.allocateDirect(IO_BUFFER_BYTES);
        final ByteBuffer[] gather = new ByteBuffer[2];
        SelectionKey key;
        State state = State.AWAIT_HELLO;
        ByteBuffer payload;
        TcpRegion payloadRegion;
        ByteBuffer control;
        int controlRequestId;
        byte[] clientNonce;
        byte[] serverNonce;
        boolean closeAfterFlush;
        long drainSinceNanos;

        Connection(SocketChannel ch) {
            this.ch = ch;
            String r;
            try {
                r = String.valueOf(ch.getRemoteAddress());
            } catch (IOException e) {
                r = "?";
            }
            this.remote = r;
        }

        void service() throws IOException {
            if (state == State.DRAINING) {
                drain();
                return;
            }
            for (;;) {
                if (!flush()) {
                    key.interestOps(SelectionKey.OP_WRITE);
                    return;
                }
                if (closeAfterFlush) {
                    state = State.DRAINING;
                    drainSinceNanos = System.nanoTime();
                    ch.shutdownOutput();
                    key.interestOps(SelectionKey.OP_READ);
                    drain();
                    return;
                }
                if (parse()) {
                    continue;
                }
                int n = ch.read(in);
                if (n < 0) {
                    close();
                    return;
                }
                if (n == 0) {
                    key.interestOps(SelectionKey.OP_READ);
                    return;
                }
            }
        }

        /** Discards input until the peer closes its side. */
        private void drain() throws IOException {
            for (;;) {
                in.clear();
                int n = ch.read(in);
                if (n < 0) {
                    close();
                    return;
                }
                if (n == 0) {
                    return;
                }
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
            boolean done = !out.hasRemaining() && (payload == null || !payload.hasRemaining());
            out.compact();
            if (done && payload != null) {
                payload = null;
                gather[1] = null;
                if (payloadRegion != null) {
                    payloadRegion.unuse();
                    payloadRegion = null;
                }
            }
            return done;
        }

        /** Consumes complete frames from {@code in}; true when it produced output or changed state. */
        private boolean parse() throws IOException {
            in.flip();
            boolean progressed = false;
            try {
                while (payload == null && !closeAfterFlush
                        && out.remaining() >= Wire.REPLY_HEADER_BYTES + INLINE_PAYLOAD_BYTES) {
                    boolean step = switch (state) {
                        case AWAIT_HELLO -> hello();
                        case AWAIT_AUTH -> auth();
                        case SERVING -> request();
                        case CONTROL_BODY -> controlBody();
                        case DRAINING, CLOSED -> false;
                    };
                    if (!step) {
                        break;
                    }
                    progressed = true;
                }
            } finally {
                in.compact();
            }
            return progressed;
        }

        private boolean hello() {
            if (in.remaining() < Wire.HELLO_BYTES) {
                return false;
            }
            int magic = in.getInt();
            int version = in.getShort();
            int flags = in.getShort();
            clientNonce = new byte[Wire.NONCE_BYTES];
            in.get(clientNonce);
            serverNonce = Handshake.nonce();
            int status = Wire.HS_OK;
            if (magic != Wire.MAGIC || version != Wire.VERSION) {
                status = Wire.HS_BAD_VERSION;
            } else if (((flags & Wire.FLAG_AUTH) != 0) != (secret != null)) {
                status = Wire.HS_AUTH_MISMATCH;
            }
            out.putInt(Wire.MAGIC).putShort(Wire.VERSION).putShort((short) status).put(serverNonce);
            if (status != Wire.HS_OK) {
                LOG.warn("refused connection from {}: {}", remote, Wire.handshakeStatus(status));
                closeAfterFlush = true;
            } else {
                state = State.AWAIT_AUTH;
            }
            return true;
        }

        private boolean auth() {
            if (in.remaining() < Wire.AUTH_BYTES) {
                return false;
            }
            boolean ok = secret == null
                    || Handshake.verify(Handshake.proof(secret, 'c', serverNonce, clientNonce), in);
            if (secret == null) {
                in.position(in.position() + Wire.AUTH_BYTES);
            }
            out.putInt(ok ? Wire.HS_OK : Wire.HS_AUTH_FAILED);
            out.put(ok ? Handshake.proof(secret, 's', clientNonce, serverNonce) : new byte[Wire.PROOF_BYTES]);
            if (ok) {
                state = State.SERVING;
            } else {
                LOG.warn("refused connection from {}: {}", remote, Wire.handshakeStatus(Wire.HS_AUTH_FAILED));
                closeAfterFlush = true;
            }
            return true;
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
                if (length < 0 || length > maxControlBytes) {
                    malformed(requestId);
                } else {
                    control = ByteBuffer.allocate(length);
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
            if (r == null) {
                status = ReadStatus.UNKNOWN_KEY;
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
            ByteBuffer view = r.serveView;
            view.clear().position((int) offset).limit((int) offset + length);
            readsServed++;
            bytesServed += length;
            if (length <= INLINE_PAYLOAD_BYTES) {
                out.put(view);
                r.unuse();
            } else {
                payload = view;
                payloadRegion = r;
            }
        }

        private boolean controlBody() {
            int n = Math.min(in.remaining(), control.remaining());
            if (n > 0) {
                int lim = in.limit();
                in.limit(in.position() + n);
                control.put(in);
                in.limit(lim);
            }
            if (control.hasRemaining()) {
                return false;
            }
            control.flip();
            ByteBuffer reply;
            int status = ReadStatus.SUCCESS;
            try {
                reply = handler.onMessage(control.asReadOnlyBuffer());
            } catch (Exception e) {
                LOG.warn("control handler failed for a message from {}", remote, e);
                reply = null;
                status = ReadStatus.HANDLER_FAILED;
            }
            int len = reply == null ? 0 : reply.remaining();
            if (len > maxControlBytes) {
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
                }
            }
            control = null;
            state = State.SERVING;
            return true;
        }

        void close() {
            if (state == State.CLOSED) {
                return;
            }
            state = State.CLOSED;
            if (payloadRegion != null) {
                payloadRegion.unuse();
                payloadRegion = null;
            }
            payload = null;
            connections.remove(this);
            if (key != null) {
                key.cancel();
            }
            try {
                ch.close();
            } catch (IOException e) {
                LOG.debug("closing {}", remote, e);
            }
        }
    }
}
