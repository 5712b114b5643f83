package org.rdmashuffle.transport.tcp;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.SocketChannel;
import java.util.ArrayDeque;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import org.rdmashuffle.pool.Registration;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
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
 */
final class TcpChannel implements RdmaChannel {
    private static final Logger LOG = LoggerFactory.getLogger(TcpChannel.class);
    private static final byte KIND_READ = 1;
    private static final byte KIND_CONTROL = 2;
    /** READs at least this long have their header read alone, so the payload lands directly in place. */
    private static final int DIRECT_PAYLOAD_BYTES = 4096;
    private static final int IO_BUFFER_BYTES = 64 << 10;
    private static final int RX_HEADER = 0;
    private static final int RX_PAYLOAD = 1;
    private static final int RX_CONTROL = 2;

    private final TcpNode node;
    private final NodeAddress peer;
    private final SocketChannel socket;
    private final int window;
    private final long timeoutNanos;
    private final int maxControlBytes;

    // The ring, indexed by sequence & mask.
    private final int mask;
    private final byte[] kind;
    private final long[] remoteAddress;
    private final int[] rkey;
    private final int[] length;
    private final ByteBuffer[] dst;
    private final int[] dstOffset;
    private final long[] requestId;
    private final ReadListener[] listener;
    private final ByteBuffer[] controlPayload;
    private final Object[] controlFuture;
    private final long[] postNanos;

    private final ReentrantLock lock = new ReentrantLock();
    /** Requests posted while the ring was full, in post order; guarded by lock. */
    private final ArrayDeque<Queued> overflow = new ArrayDeque<>();
    private static final ByteBuffer KEEP_ALIVE = ByteBuffer.allocate(0);
    private volatile long head;
    private volatile long tail;
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
    private long sent;
    private final ByteBuffer tx = ByteBuffer.allocateDirect(IO_BUFFER_BYTES);
    private ByteBuffer txExtra;
    private final ByteBuffer[] gather = new ByteBuffer[2];
    private final ByteBuffer rx = ByteBuffer.allocateDirect(IO_BUFFER_BYTES).flip();
    private int rxState = RX_HEADER;
    private ByteBuffer curDst;
    /**
     * Where the pending payload resumes and ends in {@code curDst}. Destination views are shared by
     * every channel of the node (all driven by its one requester thread), so a channel sets position and
     * limit again before each read instead of leaving them in the view for another channel to move.
     */
    private int curDstPosition;
    private int curDstLimit;
    private ByteBuffer curControl;
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
        int cap = Integer.highestOneBit(Math.max(2, window + queueDepth) - 1) << 1;
        this.mask = cap - 1;
        kind = new byte[cap];
        remoteAddress = new long[cap];
        rkey = new int[cap];
        length = new int[cap];
        dst = new ByteBuffer[cap];
        dstOffset = new int[cap];
        requestId = new long[cap];
        listener = new ReadListener[cap];
        controlPayload = new ByteBuffer[cap];
        controlFuture = new Object[cap];
        postNanos = new long[cap];
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
                ByteBuffer sink = sinkOf(batch, k);
                if (!overflow.isEmpty() || tail - head > mask) {
                    overflow.add(new Queued(KIND_READ, batch.remoteAddress(k), batch.rkey(k), batch.length(k), sink,
                            batch.dstOffset(k), batch.requestId(k), l, null, null, now));
                    continue;
                }
                long seq = tail;
                int i = (int) seq & mask;
                kind[i] = KIND_READ;
                remoteAddress[i] = batch.remoteAddress(k);
                rkey[i] = batch.rkey(k);
                length[i] = batch.length(k);
                dst[i] = sink;
                dstOffset[i] = batch.dstOffset(k);
                requestId[i] = batch.requestId(k);
                listener[i] = l;
                postNanos[i] = now;
                tail = seq + 1;
            }
        } finally {
            lock.unlock();
        }
        node.countPosted(n);
        wantsFlush = true;
        node.requester().wakeup();
    }

    /** A request posted while the ring was full. */
    private record Queued(byte kind, long remoteAddress, int rkey, int length, ByteBuffer dst, int dstOffset,
                          long requestId, ReadListener listener, ByteBuffer controlPayload,
                          CompletableFuture<ByteBuffer> controlFuture, long postNanos) {
    }

    /** Moves overflowed requests into free ring slots. Called with the lock held. */
    private void refillFromOverflow() {
        Queued q;
        while (tail - head <= mask && (q = overflow.poll()) != null) {
            long seq = tail;
            int i = (int) seq & mask;
            kind[i] = q.kind();
            remoteAddress[i] = q.remoteAddress();
            rkey[i] = q.rkey();
            length[i] = q.length();
            dst[i] = q.dst();
            dstOffset[i] = q.dstOffset();
            requestId[i] = q.requestId();
            listener[i] = q.listener();
            controlPayload[i] = q.controlPayload();
            controlFuture[i] = q.controlFuture();
            postNanos[i] = q.postNanos();
            tail = seq + 1;
        }
    }

    @Override
    public CompletableFuture<ByteBuffer> call(ByteBuffer request) {
        CompletableFuture<ByteBuffer> f = new CompletableFuture<>();
        if (request.remaining() > maxControlBytes) {
            f.completeExceptionally(new TransportException("control message of " + request.remaining()
                    + " bytes exceeds spark.shuffle.rdma.maxControlMessageSize=" + maxControlBytes));
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
            long now = System.nanoTime();
            if (!overflow.isEmpty() || tail - head > mask) {
                overflow.add(new Queued(KIND_CONTROL, 0, 0, 0, null, 0, 0, null, payload, f, now));
            } else {
                long seq = tail;
                int i = (int) seq & mask;
                kind[i] = KIND_CONTROL;
                controlPayload[i] = payload;
                controlFuture[i] = f;
                postNanos[i] = now;
                tail = seq + 1;
            }
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
        if (!open || head != tail) {
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
            fail(ReadStatus.IDLE_CLOSED, "unused for spark.shuffle.rdma.idleTimeout");
        }
    }

    /** Marks the channel closed if nothing was posted meanwhile (atomically with posts). */
    private boolean closeIfStillUnused(long now) {
        lock.lock();
        try {
            if (head == tail && overflow.isEmpty() && now - lastUsedNanos > idleNanos) {
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
            long t = tail;
            while (sent < t && sent - head < window && tx.remaining() >= Wire.REQUEST_HEADER_BYTES
                    && txExtra == null) {
                int i = (int) sent & mask;
                if (kind[i] == KIND_READ) {
                    tx.put(Wire.OP_READ).put((byte) 0).putShort((short) 0).putInt((int) sent).putInt(length[i])
                            .putInt(rkey[i]).putLong(remoteAddress[i]);
                } else {
                    ByteBuffer p = controlPayload[i];
                    tx.put(Wire.OP_CONTROL).put((byte) 0).putShort((short) 0).putInt((int) sent)
                            .putInt(p.remaining()).putInt(0).putLong(0);
                    if (p.remaining() <= tx.remaining()) {
                        tx.put(p.duplicate());
                    } else {
                        txExtra = p.duplicate();
                    }
                    controlPayload[i] = null;
                }
                sent++;
                any = true;
                lastActivityNanos = System.nanoTime();
            }
        } finally {
            lock.unlock();
        }
        return any;
    }

    /** Reads and completes every reply the socket has. */
    void onReadable() throws IOException {
        boolean completed = false;
        for (;;) {
            if (rxState == RX_HEADER) {
                if (rx.remaining() < Wire.REPLY_HEADER_BYTES) {
                    if (!fillRx()) {
                        break;
                    }
                    continue;
                }
                completed |= onHeader();
            } else {
                ByteBuffer target;
                if (rxState == RX_PAYLOAD) {
                    target = curDst;
                    target.clear().limit(curDstLimit).position(curDstPosition);
                } else {
                    target = curControl;
                }
                int r = socket.read(target);
                if (rxState == RX_PAYLOAD) {
                    curDstPosition = target.position();
                }
                if (r < 0) {
                    throw new EOFException("peer closed the connection mid-reply");
                }
                if (target.hasRemaining()) {
                    if (r == 0) {
                        break;
                    }
                    continue;
                }
                if (rxState == RX_PAYLOAD) {
                    curDst = null;
                    completeRead(ReadStatus.SUCCESS, length[(int) head & mask]);
                } else {
                    curControl = null;
                    completeControl(ReadStatus.SUCCESS, target.flip());
                }
                rxState = RX_HEADER;
                completed = true;
            }
        }
        if (completed && open) {
            flushWrites();
        }
    }

    private boolean fillRx() throws IOException {
        rx.compact();
        long h = head;
        int i = (int) h & mask;
        if (h < sent && kind[i] == KIND_READ && length[i] >= DIRECT_PAYLOAD_BYTES) {
            rx.limit(Wire.REPLY_HEADER_BYTES);
        }
        int r = socket.read(rx);
        rx.flip();
        if (r < 0) {
            if (head == tail && !rx.hasRemaining()) {
                throw new IdleClosed();
            }
            throw new EOFException("peer closed the connection");
        }
        return r > 0;
    }

    /** Handles one reply header; true when it completed a request. */
    private boolean onHeader() throws IOException {
        byte op = rx.get();
        int status = rx.get() & 0xFF;
        rx.getShort();
        int id = rx.getInt();
        int len = rx.getInt();
        if (op == Wire.OP_ERROR) {
            fail(status == 0 ? ReadStatus.PROTOCOL_ERROR : status, "peer rejected a request as "
                    + ReadStatus.describe(status));
            return false;
        }
        long h = head;
        if (h >= sent) {
            throw new ProtocolException("reply with no request outstanding");
        }
        int i = (int) h & mask;
        if (id != (int) h) {
            throw new ProtocolException("reply for request " + id + " while " + (int) h + " is due");
        }
        if (kind[i] == KIND_READ) {
            if (op != Wire.OP_READ_REPLY) {
                throw new ProtocolException("opcode " + op + " in reply to a READ");
            }
            if (status != ReadStatus.SUCCESS) {
                if (len != 0) {
                    throw new ProtocolException("error reply with a payload");
                }
                completeRead(status, 0);
                return true;
            }
            if (len != length[i]) {
                throw new ProtocolException("READ reply of " + len + " bytes for a READ of " + length[i]);
            }
            ByteBuffer d = dst[i];
            int off = dstOffset[i];
            d.clear().position(off).limit(off + len);
            drainRxInto(d);
            if (d.hasRemaining()) {
                curDst = d;
                curDstPosition = d.position();
                curDstLimit = off + len;
                rxState = RX_PAYLOAD;
                return false;
            }
            completeRead(ReadStatus.SUCCESS, len);
            return true;
        }
        if (op != Wire.OP_CONTROL_REPLY) {
            throw new ProtocolException("opcode " + op + " in reply to a control message");
        }
        if (status != ReadStatus.SUCCESS) {
            completeControl(status, null);
            return true;
        }
        if (len < 0 || len > maxControlBytes) {
            throw new ProtocolException("control reply of " + len + " bytes");
        }
        ByteBuffer c = ByteBuffer.allocate(len);
        drainRxInto(c);
        if (c.hasRemaining()) {
            curControl = c;
            rxState = RX_CONTROL;
            return false;
        }
        completeControl(ReadStatus.SUCCESS, c.flip());
        return true;
    }

    /** Moves reply bytes already buffered in {@code rx} into {@code target}, as many as it takes. */
    private void drainRxInto(ByteBuffer target) {
        int n = Math.min(rx.remaining(), target.remaining());
        if (n > 0) {
            int lim = rx.limit();
            rx.limit(rx.position() + n);
            target.put(rx);
            rx.limit(lim);
        }
    }

    private void completeRead(int status, int len) {
        int i = (int) head & mask;
        ReadListener l = listener[i];
        long id = requestId[i];
        listener[i] = null;
        dst[i] = null;
        advanceHead();
        node.countRead(status, len);
        notify(l, id, status, len);
    }

    @SuppressWarnings("unchecked")
    private void completeControl(int status, ByteBuffer reply) {
        int i = (int) head & mask;
        CompletableFuture<ByteBuffer> f = (CompletableFuture<ByteBuffer>) controlFuture[i];
        controlFuture[i] = null;
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
            head = head + 1;
            if (!overflow.isEmpty()) {
                refillFromOverflow();
            }
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
     * its post or from the last reply, whichever is later (a long queue that moves is not a timeout).
     */
    private void checkTimeout(long now) {
        long h = head;
        if (h < tail && now - Math.max(postNanos[(int) h & mask], lastReplyNanos) > timeoutNanos) {
            fail(ReadStatus.TIMEOUT, "no reply within " + TimeUnit.NANOSECONDS.toMillis(timeoutNanos)
                    + " ms (spark.shuffle.rdma.requestTimeout)");
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
                if (head < tail) {
                    int i = (int) head & mask;
                    l = listener[i];
                    id = requestId[i];
                    @SuppressWarnings("unchecked")
                    CompletableFuture<ByteBuffer> cf = (CompletableFuture<ByteBuffer>) controlFuture[i];
                    f = cf;
                    listener[i] = null;
                    dst[i] = null;
                    controlFuture[i] = null;
                    controlPayload[i] = null;
                    head = head + 1;
                    sent = Math.max(sent, head);
                } else {
                    Queued q = overflow.poll();
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

    /** The peer closed the connection while nothing was outstanding on it: not an error. */
    static final class IdleClosed extends IOException {
        private static final long serialVersionUID = 1L;

        IdleClosed() {
            super("peer closed an idle connection");
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
