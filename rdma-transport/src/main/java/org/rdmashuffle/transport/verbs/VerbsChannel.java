package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.pool.Registration;
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
 * A channel of the verbs provider: one RC queue pair to the peer, on which READs are posted as
 * chained work requests, at most {@code credits} outstanding (the READ window of
 * {@link QueuePairParameters#readWindow}: never more than either end's {@code verbs.maxQpReadAtoms},
 * which declares the device's {@code max_qp_rd_atom}). READs beyond that wait in a queue and are posted
 * from the completion thread as earlier ones complete. A post's READs are written into one
 * {@link ReadChain} the channel keeps, which the {@link QueuePair} turns into work requests built once
 * and rewritten in place, so posting allocates nothing.
 *
 * <p>Not every READ asks for a work completion: a chain's last READ does, and one in every
 * {@code signalInterval} (a quarter of the window) within long chains. A queue pair completes its work
 * requests in post order, so a signaled READ's completion also completes every READ posted before it,
 * which the channel delivers in post order from a ring of its outstanding slots; a READ's own error
 * completes it, signaled or not, after everything before it succeeded. A flushed completion reports
 * nothing done (the READs before it are posted again with the rest). READs that listeners post
 * from the completion thread while it delivers are queued and posted as one chain once it is done. The
 * completion thread thus wakes and posts once per several READs rather than once per READ.
 *
 * <p>When the queue pair fails — an RC queue pair goes to the error state on a READ the peer refuses
 * (unknown or stale rkey, out of bounds, not readable) and flushes every READ posted after it — the
 * channel asks the peer, over the authenticated control connection, whether the READ that failed it
 * was valid. An invalid one completes with the peer's reason; a valid one is posted again, with the
 * flushed READs, on a fresh queue pair. A peer that cannot be asked or reconnected, or a READ
 * outstanding past the request timeout, fails the channel instead: every READ completes with an
 * error and the node forgets the channel, so the next connect makes a new one.
 *
 * <p>Two rules keep a READ's buffer its own. A completion counts only when the id it carries has the tag
 * of the channel's current queue pair ({@link WorkRequestIds}; a node gives every queue pair a fresh
 * one), so a completion a destroyed queue pair left in the completion queue never completes READs of
 * the queue pair that reuses its number. And a READ taken off a queue pair that failed (recovery, a
 * failed channel) completes, and its buffer goes back to its owner, only once that queue pair is
 * destroyed ({@link QueuePair#destroyed}): a stalled or disconnected queue pair is not in the error
 * state and may still write into it. Its completion room goes back later still, once the completions
 * it flushed into the shared completion queue have been polled, so that failures never overrun it.
 *
 * <p>The READs' state lives in two {@link ReadTable}s, the {@link ReadQueue} waiting for credits and the
 * {@link ReadWindow} of outstanding slots; recovery, stall diagnosis and timeouts are in
 * {@link ChannelRecovery}.
 */
final class VerbsChannel implements RdmaChannel {
    static final Logger LOG = LoggerFactory.getLogger(VerbsChannel.class);
    private static final int WC_SUCCESS = WcStatus.SUCCESS;
    private static final int WC_FLUSH = WcStatus.WR_FLUSH_ERR;
    static final int OPEN = 0;
    static final int RECOVERING = 1;
    static final int CLOSED = 2;
    /** A post failed: nothing more is posted or completed on this queue pair; the channel fails next. */
    static final int FAILING = 3;

    final VerbsNode node;
    final NodeAddress peer;
    final InetSocketAddress rdmaTarget;
    private final String connection;
    final ReentrantLock lock = new ReentrantLock();
    private final ChannelRecovery recovery;

    // Guarded by lock.
    int state = OPEN;
    QueuePair endpoint;
    /** The failed queue pair while recovery has not destroyed it yet (READs may still land through it). */
    QueuePair retiring;
    /**
     * The tag of {@link #endpoint} in the ids of the work requests posted on it ({@link WorkRequestIds}):
     * a completion counts only when it carries this tag. {@link WorkRequestIds#NO_TAG} while no queue pair
     * may complete anything (recovering, failing, closed).
     */
    int endpointTag = WorkRequestIds.NO_TAG;
    /** Completion room of READs a failed post may have left on the queue pair, held until it is destroyed. */
    int pendingRoom;
    /** What a post to this channel once closed reports: IDLE_CLOSED after its peer stopped answering keep-alives. */
    private volatile int closedStatus = ReadStatus.CHANNEL_CLOSED;
    long lastKeepAliveNanos;
    private final ReadChain readChain;
    /** The outstanding READs, by slot. */
    final ReadWindow window;
    /** READs waiting for a credit. */
    final ReadQueue queue = new ReadQueue();
    long lastProgressNanos;
    /** The completion thread while it delivers completed READs: what it posts then is queued, drained after. */
    private Thread deferringThread;

    VerbsChannel(VerbsNode node, NodeAddress peer, InetSocketAddress rdmaTarget, int credits,
                 long requestTimeoutMs, long stallCheckMs, String connection) {
        this.connection = connection;
        this.node = node;
        this.peer = peer;
        this.rdmaTarget = rdmaTarget;
        this.readChain = new ReadChain(credits);
        this.window = new ReadWindow(credits);
        this.recovery = new ChannelRecovery(this, TimeUnit.MILLISECONDS.toNanos(requestTimeoutMs),
                TimeUnit.MILLISECONDS.toNanos(stallCheckMs));
    }

    /** Connects the first queue pair; the channel is usable once this returns. */
    void start(long connectTimeoutMs) throws IOException {
        QueuePair ep = node.openEndpoint(peer, rdmaTarget, connectTimeoutMs);
        lock.lock();
        try {
            attach(ep);
        } finally {
            lock.unlock();
        }
    }

    /** Posts on {@code ep} from now on. Lock held. */
    void attach(QueuePair ep) {
        endpoint = ep;
        ep.channel(this);
        endpointTag = node.nextQueuePairTag();
        lastKeepAliveNanos = System.nanoTime();
        state = OPEN;
    }

    @Override
    public NodeAddress peer() {
        return peer;
    }

    /** What the queue pairs of this channel are connected with, as logged when it opened (for diagnosis). */
    String connectionParameters() {
        return connection;
    }

    @Override
    public boolean isOpen() {
        return state != CLOSED;
    }

    @Override
    public void post(ReadBatch batch, ReadListener listener) throws TransportException {
        int n = batch.size();
        if (n == 0) {
            return;
        }
        if (state == CLOSED) {
            throw new TransportException("channel to " + peer + " is closed", closedStatus, null);
        }
        for (int i = 0; i < n; i++) {
            regionOf(batch, i); // validates every destination before anything is posted
        }
        int accepted = 0;
        lock.lock();
        try {
            long now = System.nanoTime();
            for (; accepted < n; accepted++) {
                // A post never waits (on a task thread or on a completion thread alike): past the send
                // queue depth the queue grows; callers bound what they post (the fetcher's per-peer budget).
                if (state == CLOSED) {
                    break;
                }
                int len = batch.length(accepted);
                if (len <= 0) {
                    node.completeLater(listener, batch.requestId(accepted), ReadStatus.INVALID_LENGTH);
                    continue;
                }
                VerbsRegion dst = regionOf(batch, accepted);
                queue.addLast(batch.remoteAddress(accepted), batch.rkey(accepted), len, localOf(batch, accepted, dst),
                        dst.lkey, batch.requestId(accepted), listener, now);
            }
            if (state == OPEN && deferringThread != Thread.currentThread()) {
                drain(); // the completion thread, while delivering, posts once when it is done
            }
        } finally {
            lock.unlock();
        }
        node.countPosted(accepted);
        if (accepted == 0) {
            throw new TransportException("channel to " + peer + " closed while posting", closedStatus, null);
        }
        for (int i = accepted; i < n; i++) {
            node.completeLater(listener, batch.requestId(i), ReadStatus.CHANNEL_CLOSED);
        }
    }

    private VerbsRegion regionOf(ReadBatch b, int i) {
        RegisteredBuffer rb = b.dstBuffer(i);
        if (rb != null) {
            Registration reg = rb.registration();
            if (!(reg instanceof VerbsRegion r) || r.node != node || !r.isOpen()) {
                throw new IllegalArgumentException("READ destination is not registered with this node");
            }
            return r;
        }
        MemoryRegion mr = b.dstRegion(i);
        if (!(mr instanceof VerbsRegion r) || r.node != node || !r.isOpen()) {
            throw new IllegalArgumentException("READ destination is not a live region of this node");
        }
        return r;
    }

    /** The device address entry {@code i} lands at, in its destination region {@code r}. */
    private static long localOf(ReadBatch b, int i, VerbsRegion r) {
        RegisteredBuffer rb = b.dstBuffer(i);
        long base = rb != null ? r.address + rb.registrationOffset() : r.address;
        return base + b.dstOffset(i);
    }

    /** Posts queued READs while credits last, as one chain per call. Lock held, state OPEN. */
    void drain() {
        while (!queue.isEmpty() && window.available() > 0) {
            int want = Math.min(queue.size(), window.available());
            int k = node.takeCompletionRoom(want);
            if (k == 0) {
                node.waitingForRoom(this);
                return;
            }
            if (window.idle()) {
                lastProgressNanos = System.nanoTime(); // the queue pair was idle: the clock starts now
            }
            window.fillChain(queue, k, readChain, endpointTag);
            try {
                endpoint.post(readChain, k);
            } catch (IOException e) {
                // post_send may have taken a prefix of the chain, or none of it. None of it may be completed by a
                // later completion (the ring would say it succeeded): it leaves the ring for the queue, the queue
                // pair's completions stop counting, and the channel fails (destroying the queue pair before any
                // listener hears). The prefix may still complete into the completion queue: its room is held
                // until the queue pair is destroyed.
                window.unpost(readChain, k, queue);
                pendingRoom += k;
                endpointTag = WorkRequestIds.NO_TAG;
                state = FAILING;
                failLater(ReadStatus.CONNECTION_LOST, "posting READs failed: " + e.getMessage());
                return;
            }
        }
    }

    /**
     * A work completion, on the device's completion thread: completes, in post order, every outstanding
     * READ up to the one it names (those before it were posted unsignaled and succeeded), then that one
     * with its status. Listeners are called without the lock; what they post meanwhile is posted once,
     * after the last.
     */
    void onCompletion(QueuePair from, long wrId, int wcStatus) {
        int target = WorkRequestIds.slot(wrId);
        int wrTag = WorkRequestIds.tag(wrId);
        Thread me = Thread.currentThread();
        boolean delivering = false;
        try {
            while (true) {
                ReadListener l;
                long requestId;
                int len;
                boolean last;
                lock.lock();
                try {
                    if (from != endpoint || wrTag != endpointTag || state != OPEN) {
                        // A queue pair this channel has given up (before, or while listeners ran), or a completion
                        // of a destroyed queue pair whose number the current one reuses: not this queue pair's.
                        return;
                    }
                    if (!window.isOutstanding(target)) {
                        LOG.warn("completion for unknown work request {} on channel to {}", wrId, peer);
                        return;
                    }
                    int h = window.oldest();
                    if ((h == target && wcStatus != WC_SUCCESS) || wcStatus == WC_FLUSH) {
                        // A flush says nothing for sure of the READs before it (had a completion queue dropped
                        // theirs, they would not have landed): they go out again with the rest, never reported
                        // done on its word. An error of the READ itself does: RC completed everything before it.
                        // A flushed READ was not the cause: the queue pair failed earlier (or disconnected).
                        recovery.start(wcStatus == WC_FLUSH ? -1 : target,
                                "a READ completed with " + WcStatus.name(wcStatus));
                        return;
                    }
                    window.popOldest();
                    ReadTable slots = window.slots;
                    l = slots.listener(h);
                    requestId = slots.requestId(h);
                    len = slots.length(h);
                    lastProgressNanos = System.nanoTime();
                    window.release(h);
                    node.returnCompletionRoom(1);
                    last = h == target;
                    deferringThread = me;
                    delivering = true;
                } finally {
                    lock.unlock();
                }
                node.countRead(ReadStatus.SUCCESS, len);
                deliver(l, requestId, ReadStatus.SUCCESS, len);
                if (last) {
                    return;
                }
            }
        } finally {
            if (delivering) {
                lock.lock();
                try {
                    if (deferringThread == me) {
                        deferringThread = null;
                    }
                    if (state == OPEN) {
                        drain();
                    }
                } finally {
                    lock.unlock();
                }
            }
        }
    }

    @Override
    public CompletableFuture<ByteBuffer> call(ByteBuffer request) {
        if (state == CLOSED) {
            return CompletableFuture.failedFuture(new TransportException("channel to " + peer + " is closed",
                    ReadStatus.CHANNEL_CLOSED, null));
        }
        return node.userCall(peer, request);
    }

    /** See {@link ChannelRecovery#checkTimeouts}. */
    void checkTimeouts(long now, long keepAliveNanos) {
        recovery.checkTimeouts(now, keepAliveNanos);
    }

    /** See {@link ChannelRecovery#keepAliveAnswered}. */
    void keepAliveAnswered(boolean answered, String why) {
        recovery.keepAliveAnswered(answered, why);
    }

    /** Completion room became free on the node: post what waits. */
    void roomAvailable() {
        lock.lock();
        try {
            if (state == OPEN) {
                drain();
            }
        } finally {
            lock.unlock();
        }
    }

    /** The queue pair disconnected (the peer closed or went away). */
    void onDisconnected(QueuePair ep) {
        lock.lock();
        try {
            if (ep == endpoint && state == OPEN) {
                recovery.start(-1, "the queue pair disconnected");
            }
        } finally {
            lock.unlock();
        }
    }

    void failLater(int status, String why) {
        node.execute(() -> fail(status, why));
    }

    /**
     * Completes every READ with {@code status}, closes the queue pair and leaves the node's cache. The READs
     * complete (and their buffers may go back to a pool) only once every queue pair they were posted on is
     * destroyed; the completion room they held goes back once that queue pair's completions are polled.
     */
    void fail(int status, String why) {
        Deliveries d = new Deliveries();
        QueuePair ep;
        QueuePair old;
        int room;
        lock.lock();
        try {
            if (state == CLOSED) {
                return;
            }
            state = CLOSED;
            if (status == ReadStatus.IDLE_CLOSED) {
                closedStatus = ReadStatus.IDLE_CLOSED;
            }
            endpointTag = WorkRequestIds.NO_TAG;
            int outstanding = window.drainTo(d);
            room = outstanding + pendingRoom;
            pendingRoom = 0;
            queue.drainTo(d);
            ep = endpoint;
            endpoint = null;
            old = retiring;
            retiring = null;
            if (d.size() == 0 && status != ReadStatus.CHANNEL_CLOSED) {
                LOG.info("channel to {} closed: {}", peer, why);
            }
        } finally {
            lock.unlock();
        }
        if (status != ReadStatus.CHANNEL_CLOSED && d.size() > 0) {
            LOG.warn("channel to {} failed: {} ({} READs completed with '{}')", peer, why, d.size(),
                    ReadStatus.describe(status));
        }
        node.channelClosed(this);
        if (ep != null) {
            ep.channel(null);
            recovery.retire(ep, room);
            ep.closeQuietly();
        } else {
            node.returnCompletionRoom(room); // no queue pair held them
        }
        if (old != null) {
            // Recovery had not destroyed it yet (it may be at it): closed off this thread, which may be the timer;
            // the READs are delivered once it is destroyed, whoever destroys it.
            node.execute(old::closeQuietly);
        }
        recovery.deliverOnceDestroyed(d, status, ep, old);
    }

    @Override
    public void close() {
        fail(ReadStatus.CHANNEL_CLOSED, "closed");
    }

    void deliver(ReadListener l, long requestId, int status, int len) {
        try {
            l.onReadComplete(requestId, status, len);
        } catch (RuntimeException e) {
            LOG.error("READ listener failed for request {} on channel to {}", requestId, peer, e);
        }
    }

    @Override
    public String toString() {
        return "VerbsChannel[" + peer + " via " + rdmaTarget + "]";
    }
}
