package org.rdmashuffle.transport.tcp;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.SocketChannel;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import org.rdmashuffle.pool.Registration;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The requesting side of one tcp connection. Posters put requests into a ring under a short lock;
 * the node's requester thread sends them (at most {@code window} outstanding), reads each reply
 * header, and reads the payload straight from the socket into the destination buffer. Replies come
 * in request order. Completions run on the requester thread.
 *
 * <p>A post never waits: when the ring is full, requests queue in an overflow list (in post order)
 * and move into the ring as replies free slots, so a completion that posts more never blocks the
 * thread that would free room. The request timeout measures progress: the oldest request fails the
 * channel when no reply came for the timeout since it was posted or since the last reply, whichever
 * is later. With nothing outstanding the channel sends an empty control message (a keep-alive) now
 * and then, so the peer's idle timeout never closes a live channel.
 *
 * <p>Its pieces: {@link RequestRing} holds the requests in post order (ring and overflow),
 * {@link ReplyReader} reads the replies; this class posts, sends, completes, times out and fails.
 */
final class TcpChannel implements RdmaChannel {
    private static final Logger LOG = LoggerFactory.getLogger(TcpChannel.class);
    static final int IO_BUFFER_BYTES = 64 << 10;

    private final TcpNode node;
    private final NodeAddress peer;
    private final SocketChannel socket;
    private final int window;
    private final long timeoutNanos;
    private final int maxControlBytes;

    /** The requests in post order; guarded by {@code lock} as {@link RequestRing} says. */
    private final RequestRing ring;
    private final ReentrantLock lock = new ReentrantLock();
    private static final ByteBuffer KEEP_ALIVE = ByteBuffer.allocate(0);
    private volatile boolean open = true;
    private volatile boolean closeRequested;
    /** What a post to this channel once closed reports: IDLE_CLOSED after an idle close, else CHANNEL_CLOSED. */
    private volatile int closedStatus = ReadStatus.CHANNEL_CLOSED;
    /** When a caller last posted or called (keep-alives do not count). */
    private volatile long lastUsedNanos = System.nanoTime();
    private final long idleNanos;
    /** Left the node's cache after the idle timeout unused; requester thread only. */
    private boolean retired;
    volatile boolean wantsFlush;

    // Requester thread only.
    SelectionKey key;
    private final ReplyReader replies;
    private final ByteBuffer tx = ByteBuffer.allocateDirect(IO_BUFFER_BYTES);
    private ByteBuffer txExtra;
    private final ByteBuffer[] gather = new ByteBuffer[2];
    private boolean failed;
    /** When the last reply completed (or the channel opened); requester thread only. */
    private long lastReplyNanos = System.nanoTime();
    /** When a request was last sent or a reply last completed; requester thread only. */
    private long lastActivityNanos = lastReplyNanos;

    TcpChannel(TcpNode node, NodeAddress peer, SocketChannel socket, int window, int queueDepth, long timeoutMs,
               int maxControlBytes, long idleTimeoutMs) {
        this.idleNanos = TimeUnit.MILLISECONDS.toNanos(idleTimeoutMs);
        this.node = node;
        this.peer = peer;
        this.socket = socket;
        this.window = window;
        this.timeoutNanos = TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        this.maxControlBytes = maxControlBytes;
        this.ring = new RequestRing(window + queueDepth);
        this.replies = new ReplyReader(this, socket, ring, maxControlBytes);
    }

    @Override
    public NodeAddress peer() {
        return peer;
    }

    @Override
    public boolean isOpen() {
        return open;
    }

    SocketChannel socket() {
        return socket;
    }

    private ByteBuffer sinkOf(ReadBatch b, int i) {
        RegisteredBuffer rb = b.dstBuffer(i);
        if (rb != null) {
            Registration reg = rb.registration();
            if (!(reg instanceof TcpRegion r) || r.node != node || !r.isOpen()) {
                throw new IllegalArgumentException("READ destination is not registered with this node");
            }
            return rb.transportView();
        }
        MemoryRegion mr = b.dstRegion(i);
        if (!(mr instanceof TcpRegion r) || r.node != node || !r.isOpen()) {
            throw new IllegalArgumentException("READ destination is not a live region of this node");
        }
        return r.sinkView;
    }

    @Override
    public void post(ReadBatch batch, ReadListener l) throws TransportException {
        int n = batch.size();
        if (n == 0) {
            return;
        }
        if (!open) {
            throw new TransportException("channel to " + peer + " is closed", closedStatus, null);
        }
        for (int i = 0; i < n; i++) {
            sinkOf(batch, i);
        }
        lock.lock();
        try {
            if (!open) {
                throw new TransportException("channel to " + peer + " is closed", closedStatus, null);
            }
            long now = System.nanoTime();
            lastUsedNanos = now;
            for (int k = 0; k < n; k++) {
                ring.addRead(batch.remoteAddress(k), batch.rkey(k), batch.length(k), sinkOf(batch, k),
                        batch.dstOffset(k), batch.requestId(k), l, now);
            }
        } finally {
            lock.unlock();
        }
        node.countPosted(n);
        wantsFlush = true;
        node.requester().wakeup();
    }

    @Override
    public CompletableFuture<ByteBuffer> call(ByteBuffer request) {
        CompletableFuture<ByteBuffer> f = new CompletableFuture<>();
        if (request.remaining() > maxControlBytes) {
            f.completeExceptionally(new TransportException("control message of " + request.remaining()
                    + " bytes exceeds " + node.keys.maxControlMessageSize + "=" + maxControlBytes));
            return f;
        }
        if (!request.hasRemaining()) {
            f.completeExceptionally(new IllegalArgumentException("a control message needs a body (empty ones are "
                    + "the transport's keep-alives)"));
            return f;
        }
        ByteBuffer copy = ByteBuffer.allocate(request.remaining());
        copy.put(request.duplicate()).flip();
        lastUsedNanos = System.nanoTime();
        if (!enqueueControl(copy, f)) {
            f.completeExceptionally(new TransportException("channel to " + peer + " is closed",
                    ReadStatus.CHANNEL_CLOSED, null));
        }
        return f;
    }

    /** Queues a control message ({@code f} null: a keep-alive); false when the channel is closed. */
    private boolean enqueueControl(ByteBuffer payload, CompletableFuture<ByteBuffer> f) {
        lock.lock();
        try {
            if (!open) {
                return false;
            }
            ring.addControl(payload, f, System.nanoTime());
        } finally {
            lock.unlock();
        }
        wantsFlush = true;
        node.requester().wakeup();
        return true;
    }

    /**
     * Requester thread, every few tens of milliseconds: the request timeout; while the channel is in use
     * (posted to within the idle timeout), a keep-alive whenever nothing moved for a third of it, so
     * the peer never closes a live channel; once unused for the idle timeout, the channel leaves the
     * node's cache (holders may still post), and a third of it later, still unused, it closes.
     */
    void onTick(long now) {
        checkTimeout(now);
        if (!open || ring.head != ring.tail) {
            return;
        }
        long unused = now - lastUsedNanos;
        if (unused < idleNanos) {
            if (now - lastActivityNanos > idleNanos / 3) {
                lastActivityNanos = now;
                enqueueControl(KEEP_ALIVE, null);
            }
        } else if (!retired) {
            retired = true;
            node.retired(this);
        } else if (unused > idleNanos + idleNanos / 3 && closeIfStillUnused(now)) {
            fail(ReadStatus.IDLE_CLOSED, "unused for " + node.keys.idleTimeout);
        }
    }

    /** Marks the channel closed if nothing was posted meanwhile (atomically with posts). */
    private boolean closeIfStillUnused(long now) {
        lock.lock();
        try {
            if (ring.isIdle() && now - lastUsedNanos > idleNanos) {
                closedStatus = ReadStatus.IDLE_CLOSED;
                open = false;
                return true;
            }
            return false;
        } finally {
            lock.unlock();
        }
    }

    @Override
    public void close() {
        if (!open) {
            return;
        }
        closeRequested = true;
        node.requester().wakeup();
    }

    boolean closeRequested() {
        return closeRequested;
    }

    // ---- requester thread ----

    /** Sends queued requests while the window allows. */
    void flushWrites() throws IOException {
        while (open) {
            if (tx.position() > 0 || txExtra != null) {
                tx.flip();
                if (txExtra == null) {
                    socket.write(tx);
                } else {
                    gather[0] = tx;
                    gather[1] = txExtra;
                    socket.write(gather);
                }
                boolean done = !tx.hasRemaining() && (txExtra == null || !txExtra.hasRemaining());
                tx.compact();
                if (!done) {
                    key.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
                    return;
                }
                txExtra = null;
                gather[1] = null;
            }
            if (!encode()) {
                key.interestOps(SelectionKey.OP_READ);
                return;
            }
        }
    }

    private boolean encode() {
        boolean any = false;
        lock.lock();
        try {
            RequestRing r = ring;
            long t = r.tail;
            while (r.sent < t && r.sent - r.head < window && tx.remaining() >= Wire.REQUEST_HEADER_BYTES
                    && txExtra == null) {
                long sent = r.sent;
                int i = r.slot(sent);
                if (r.kind[i] == RequestRing.KIND_READ) {
                    tx.put(Wire.OP_READ).put((byte) 0).putShort((short) 0).putInt((int) sent).putInt(r.length[i])
                            .putInt(r.rkey[i]).putLong(r.remoteAddress[i]);
                } else {
                    ByteBuffer p = r.controlPayload[i];
                    tx.put(Wire.OP_CONTROL).put((byte) 0).putShort((short) 0).putInt((int) sent)
                            .putInt(p.remaining()).putInt(0).putLong(0);
                    if (p.remaining() <= tx.remaining()) {
                        tx.put(p.duplicate());
                    } else {
                        txExtra = p.duplicate();
                    }
                    r.controlPayload[i] = null;
                }
                r.sent = sent + 1;
                any = true;
                lastActivityNanos = System.nanoTime();
            }
        } finally {
            lock.unlock();
        }
        return any;
    }

    /** Reads and completes every reply the socket has, then sends what the completions freed room for. */
    void onReadable() throws IOException {
        if (replies.read() && open) {
            flushWrites();
        }
    }

    /** The oldest request, a READ, completed with {@code status}; requester thread. */
    void completeRead(int status, int len) {
        RequestRing r = ring;
        int i = r.slot(r.head);
        ReadListener l = r.listener[i];
        long id = r.requestId[i];
        r.listener[i] = null;
        r.dst[i] = null;
        advanceHead();
        node.countRead(status, len);
        notify(l, id, status, len);
    }

    /** The oldest request, a control message, completed with {@code status}; requester thread. */
    @SuppressWarnings("unchecked")
    void completeControl(int status, ByteBuffer reply) {
        int i = ring.slot(ring.head);
        CompletableFuture<ByteBuffer> f = (CompletableFuture<ByteBuffer>) ring.controlFuture[i];
        ring.controlFuture[i] = null;
        advanceHead();
        if (f == null) {
            return; // a keep-alive's answer
        }
        if (status == ReadStatus.SUCCESS) {
            f.complete(reply);
        } else {
            f.completeExceptionally(new TransportException("control message to " + peer + " failed: "
                    + ReadStatus.describe(status), status, null));
        }
    }

    private void advanceHead() {
        long now = System.nanoTime();
        lastReplyNanos = now;
        lastActivityNanos = now;
        lock.lock();
        try {
            ring.advanceHead();
        } finally {
            lock.unlock();
        }
    }

    private static void notify(ReadListener l, long id, int status, int len) {
        try {
            l.onReadComplete(id, status, len);
        } catch (Throwable t) {
            // A listener's failure is its own: the requester thread goes on for every other request.
            LOG.error("READ listener threw; the completion is not retried", t);
        }
    }

    /**
     * Fails the channel if its oldest request got no reply within the request timeout, counted from
     * its post or the last reply, whichever is later, this JVM's pauses not counted (a long queue that moves
     * is not a timeout, nor is a reader that did not run: {@link Pauses}).
     */
    private void checkTimeout(long now) {
        long h = ring.head;
        if (h >= ring.tail) {
            return;
        }
        long from = Math.max(ring.postNanos[ring.slot(h)], lastReplyNanos);
        if (now - from > timeoutNanos && now - from - Pauses.pausedSince(from) > timeoutNanos) {
            fail(ReadStatus.TIMEOUT, "no reply within " + TimeUnit.NANOSECONDS.toMillis(timeoutNanos)
                    + " ms (" + node.keys.requestTimeout + ")");
        }
    }

    /**
     * Closes the connection and completes every outstanding request with {@code status}. Runs on the
     * requester thread, or on the closing thread once the requester has stopped.
     */
    void fail(int status, String reason) {
        synchronized (this) {
            // Normally the requester thread; a node closing concurrently may race it, and only one may win.
            if (failed) {
                return;
            }
            failed = true;
        }
        if (status == ReadStatus.IDLE_CLOSED) {
            closedStatus = ReadStatus.IDLE_CLOSED; // before open goes false: a post that sees it closed says so
        }
        open = false;
        if (status != ReadStatus.CHANNEL_CLOSED && status != ReadStatus.IDLE_CLOSED) {
            LOG.warn("channel to {} failed: {}", peer, reason);
        } else {
            LOG.debug("channel to {} closed: {}", peer, reason);
        }
        try {
            if (key != null) {
                key.cancel();
            }
            socket.close();
        } catch (Throwable t) {
            LOG.debug("closing socket to {}", peer, t);
        }
        try {
            drain(status, reason);
        } finally {
            node.channelClosed(this);
        }
    }

    /**
     * Completes every outstanding and queued request with {@code status}, one at a time (nothing
     * allocated up front, so running out of memory part-way cannot leave a request uncompleted for good).
     */
    private void drain(int status, String reason) {
        for (;;) {
            ReadListener l;
            long id;
            CompletableFuture<ByteBuffer> f;
            lock.lock();
            try {
                RequestRing r = ring;
                if (r.head < r.tail) {
                    int i = r.slot(r.head);
                    l = r.listener[i];
                    id = r.requestId[i];
                    @SuppressWarnings("unchecked")
                    CompletableFuture<ByteBuffer> cf = (CompletableFuture<ByteBuffer>) r.controlFuture[i];
                    f = cf;
                    r.listener[i] = null;
                    r.dst[i] = null;
                    r.controlFuture[i] = null;
                    r.controlPayload[i] = null;
                    r.head = r.head + 1;
                    r.sent = Math.max(r.sent, r.head);
                } else {
                    RequestRing.Queued q = r.pollOverflow();
                    if (q == null) {
                        return;
                    }
                    l = q.listener();
                    id = q.requestId();
                    f = q.controlFuture();
                }
            } finally {
                lock.unlock();
            }
            if (l != null) {
                node.countRead(status, 0);
                notify(l, id, status, 0);
            } else if (f != null) {
                try {
                    f.completeExceptionally(new TransportException("control message to " + peer + " failed: "
                            + ReadStatus.describe(status) + " (" + reason + ")", status, null));
                } catch (Throwable t) {
                    LOG.error("failing a control message to {}", peer, t);
                }
            }
        }
    }

    @Override
    public String toString() {
        return "TcpChannel[" + peer + (open ? "" : ", closed") + "]";
    }

    /**
     * The peer closed the connection in order (the end of the stream, not a reset) with no reply under way:
     * every request still outstanding got no byte of its reply, so the peer never served it. A peer does so
     * to make room for a newcomer when this connection was silent ({@code maxConnections}), or when its node
     * closes; either way not this channel's error: it fails with {@link ReadStatus#IDLE_CLOSED}, and its
     * holders connect again and post again (a peer that is gone then refuses the connect).
     */
    static final class IdleClosed extends IOException {
        private static final long serialVersionUID = 1L;

        IdleClosed() {
            super("peer closed the connection with no reply under way");
        }
    }

    /** The peer's reply broke the protocol. */
    static final class ProtocolException extends IOException {
        private static final long serialVersionUID = 1L;

        ProtocolException(String message) {
            super(message);
        }
    }
}
