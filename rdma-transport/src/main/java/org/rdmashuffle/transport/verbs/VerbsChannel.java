package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
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
 */
final class VerbsChannel implements RdmaChannel {
    private static final Logger LOG = LoggerFactory.getLogger(VerbsChannel.class);
    private static final int WC_SUCCESS = WcStatus.SUCCESS;
    private static final int WC_FLUSH = WcStatus.WR_FLUSH_ERR;
    private static final int OPEN = 0;
    private static final int RECOVERING = 1;
    private static final int CLOSED = 2;
    /** A post failed: nothing more is posted or completed on this queue pair; the channel fails next. */
    private static final int FAILING = 3;
    /** A READ flushed by another READ's error is posted again at most this many times. */
    private static final int MAX_REPOSTS = 2;

    private final VerbsNode node;
    private final NodeAddress peer;
    private final InetSocketAddress rdmaTarget;
    private final int credits;
    private final long requestTimeoutNanos;
    private final String connection;
    private final ReentrantLock lock = new ReentrantLock();

    // Guarded by lock.
    private int state = OPEN;
    private QueuePair endpoint;
    /** The failed queue pair while recovery has not destroyed it yet (READs may still land through it). */
    private QueuePair retiring;
    /**
     * The tag of {@link #endpoint} in the ids of the work requests posted on it ({@link WorkRequestIds}):
     * a completion counts only when it carries this tag. {@link WorkRequestIds#NO_TAG} while no queue pair
     * may complete anything (recovering, failing, closed).
     */
    private int endpointTag = WorkRequestIds.NO_TAG;
    /** Completion room of READs a failed post may have left on the queue pair, held until it is destroyed. */
    private int pendingRoom;
    /** What a post to this channel once closed reports: IDLE_CLOSED after its peer stopped answering keep-alives. */
    private volatile int closedStatus = ReadStatus.CHANNEL_CLOSED;
    private long lastKeepAliveNanos;
    private int keepAlivesUnanswered;
    private final ReadChain readChain;
    // Outstanding READs, by slot (the low half of the work request id; the high half is the queue pair's tag).
    private final long[] slotRemote;
    private final int[] slotRkey;
    private final int[] slotLength;
    private final long[] slotLocal;
    private final int[] slotLkey;
    private final long[] slotRequestId;
    private final ReadListener[] slotListener;
    private final long[] slotPostNanos;
    private final byte[] slotReposts;
    private final boolean[] slotBusy;
    private final long[] slotSeq;
    private final int[] order;
    private long postSeq;
    private long lastProgressNanos;
    private boolean stallCheckRunning;
    private final long stallNanos;
    private final int[] free;
    private int freeTop;
    /** The outstanding slots in post order: completions of a queue pair come in that order. */
    private final int[] ring;
    private int ringHead;
    private int ringSize;
    /** At most this many READs in a row are posted without asking for a work completion. */
    private final int signalInterval;
    private int unsignaledRun;
    /** The completion thread while it delivers completed READs: what it posts then is queued, drained after. */
    private Thread deferringThread;
    // READs waiting for a credit: a ring that grows.
    private long[] qRemote = new long[64];
    private int[] qRkey = new int[64];
    private int[] qLength = new int[64];
    private long[] qLocal = new long[64];
    private int[] qLkey = new int[64];
    private long[] qRequestId = new long[64];
    private ReadListener[] qListener = new ReadListener[64];
    private long[] qPostNanos = new long[64];
    private byte[] qReposts = new byte[64];
    private int qHead;
    private int qSize;

    VerbsChannel(VerbsNode node, NodeAddress peer, InetSocketAddress rdmaTarget, int credits,
                 long requestTimeoutMs, long stallCheckMs, String connection) {
        this.connection = connection;
        this.stallNanos = TimeUnit.MILLISECONDS.toNanos(stallCheckMs);
        this.node = node;
        this.peer = peer;
        this.rdmaTarget = rdmaTarget;
        this.credits = credits;
        this.requestTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(requestTimeoutMs);
        this.readChain = new ReadChain(credits);
        slotRemote = new long[credits];
        slotRkey = new int[credits];
        slotLength = new int[credits];
        slotLocal = new long[credits];
        slotLkey = new int[credits];
        slotRequestId = new long[credits];
        slotListener = new ReadListener[credits];
        slotPostNanos = new long[credits];
        slotReposts = new byte[credits];
        slotBusy = new boolean[credits];
        slotSeq = new long[credits];
        order = new int[credits];
        free = new int[credits];
        ring = new int[credits];
        signalInterval = Math.max(1, credits / 4);
        for (int i = 0; i < credits; i++) {
            free[i] = credits - 1 - i;
        }
        freeTop = credits;
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

    private void attach(QueuePair ep) {
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
                enqueueLast(batch.remoteAddress(accepted), batch.rkey(accepted), len, localOf(batch, accepted, dst),
                        dst.lkey, batch.requestId(accepted), listener, now, (byte) 0);
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

    private void enqueueLast(long remote, int rkey, int len, long local, int lkey, long requestId, ReadListener l,
                             long postNanos, byte reposts) {
        if (qSize == qRemote.length) {
            grow();
        }
        int i = (qHead + qSize) & (qRemote.length - 1);
        setQueued(i, remote, rkey, len, local, lkey, requestId, l, postNanos, reposts);
        qSize++;
    }

    private void enqueueFirst(long remote, int rkey, int len, long local, int lkey, long requestId, ReadListener l,
                              long postNanos, byte reposts) {
        if (qSize == qRemote.length) {
            grow();
        }
        qHead = (qHead - 1) & (qRemote.length - 1);
        setQueued(qHead, remote, rkey, len, local, lkey, requestId, l, postNanos, reposts);
        qSize++;
    }

    private void setQueued(int i, long remote, int rkey, int len, long local, int lkey, long requestId,
                           ReadListener l, long postNanos, byte reposts) {
        qRemote[i] = remote;
        qRkey[i] = rkey;
        qLength[i] = len;
        qLocal[i] = local;
        qLkey[i] = lkey;
        qRequestId[i] = requestId;
        qListener[i] = l;
        qPostNanos[i] = postNanos;
        qReposts[i] = reposts;
    }

    private void grow() {
        int c = qRemote.length * 2;
        long[] r = new long[c];
        int[] k = new int[c];
        int[] len = new int[c];
        long[] loc = new long[c];
        int[] lk = new int[c];
        long[] id = new long[c];
        ReadListener[] ls = new ReadListener[c];
        long[] t = new long[c];
        byte[] rp = new byte[c];
        for (int j = 0; j < qSize; j++) {
            int from = (qHead + j) & (qRemote.length - 1);
            r[j] = qRemote[from];
            k[j] = qRkey[from];
            len[j] = qLength[from];
            loc[j] = qLocal[from];
            lk[j] = qLkey[from];
            id[j] = qRequestId[from];
            ls[j] = qListener[from];
            t[j] = qPostNanos[from];
            rp[j] = qReposts[from];
        }
        qRemote = r;
        qRkey = k;
        qLength = len;
        qLocal = loc;
        qLkey = lk;
        qRequestId = id;
        qListener = ls;
        qPostNanos = t;
        qReposts = rp;
        qHead = 0;
    }

    /** Posts queued READs while credits last, as one chain per call. Lock held, state OPEN. */
    private void drain() {
        while (qSize > 0 && freeTop > 0) {
            int want = Math.min(qSize, freeTop);
            int k = node.takeCompletionRoom(want);
            if (k == 0) {
                node.waitingForRoom(this);
                return;
            }
            if (freeTop == credits) {
                lastProgressNanos = System.nanoTime(); // the queue pair was idle: the clock starts now
            }
            int tag = endpointTag;
            int mask = qRemote.length - 1;
            ReadChain c = readChain;
            for (int j = 0; j < k; j++) {
                int q = qHead;
                int slot = free[--freeTop];
                slotRemote[slot] = qRemote[q];
                slotRkey[slot] = qRkey[q];
                slotLength[slot] = qLength[q];
                slotLocal[slot] = qLocal[q];
                slotLkey[slot] = qLkey[q];
                slotRequestId[slot] = qRequestId[q];
                slotListener[slot] = qListener[q];
                slotPostNanos[slot] = qPostNanos[q];
                slotReposts[slot] = qReposts[q];
                slotBusy[slot] = true;
                slotSeq[slot] = postSeq++;
                ring[(ringHead + ringSize++) % credits] = slot;
                qListener[q] = null;
                qHead = (q + 1) & mask;
                qSize--;
                c.wrId[j] = WorkRequestIds.of(tag, slot);
                c.local[j] = slotLocal[slot];
                c.length[j] = slotLength[slot];
                c.lkey[j] = slotLkey[slot];
                c.remote[j] = slotRemote[slot];
                c.rkey[j] = slotRkey[slot];
                boolean signaled = ++unsignaledRun >= signalInterval || j == k - 1;
                if (signaled) {
                    unsignaledRun = 0;
                }
                c.signaled[j] = signaled;
            }
            try {
                endpoint.post(c, k);
            } catch (IOException e) {
                // post_send may have taken a prefix of the chain, or none of it. None of it may be completed by a
                // later completion (the ring would say it succeeded): it leaves the ring for the queue, the queue
                // pair's completions stop counting, and the channel fails (destroying the queue pair before any
                // listener hears). The prefix may still complete into the completion queue: its room is held
                // until the queue pair is destroyed.
                ringSize -= k;
                for (int j = k - 1; j >= 0; j--) {
                    int slot = WorkRequestIds.slot(c.wrId[j]);
                    enqueueFirst(slotRemote[slot], slotRkey[slot], slotLength[slot], slotLocal[slot], slotLkey[slot],
                            slotRequestId[slot], slotListener[slot], slotPostNanos[slot], slotReposts[slot]);
                    releaseSlot(slot);
                }
                pendingRoom += k;
                unsignaledRun = 0;
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
                    if (target < 0 || target >= credits || !slotBusy[target] || ringSize == 0) {
                        LOG.warn("completion for unknown work request {} on channel to {}", wrId, peer);
                        return;
                    }
                    int h = ring[ringHead];
                    if ((h == target && wcStatus != WC_SUCCESS) || wcStatus == WC_FLUSH) {
                        // A flush says nothing for sure of the READs before it (had a completion queue dropped
                        // theirs, they would not have landed): they go out again with the rest, never reported
                        // done on its word. An error of the READ itself does: RC completed everything before it.
                        onError(target, wcStatus);
                        return;
                    }
                    ringHead = (ringHead + 1) % credits;
                    ringSize--;
                    l = slotListener[h];
                    requestId = slotRequestId[h];
                    len = slotLength[h];
                    lastProgressNanos = System.nanoTime();
                    releaseSlot(h);
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

    private void releaseSlot(int slot) {
        slotBusy[slot] = false;
        slotListener[slot] = null;
        free[freeTop++] = slot;
    }

    /** Lock held, state OPEN. */
    private void onError(int slot, int wcStatus) {
        String name = wcName(wcStatus);
        // A flushed READ was not the cause: the queue pair failed earlier (or disconnected).
        startRecovery(wcStatus == WC_FLUSH ? -1 : slot, "a READ completed with " + name);
    }

    /**
     * The queue pair failed. The READ that failed it (the given slot, else the oldest outstanding) is
     * set aside to be diagnosed; every other outstanding READ was flushed and goes back to the head of
     * the queue, oldest first, to be posted again on a fresh queue pair. The failed queue pair may still
     * write into their buffers (a stalled or disconnected one is not in the error state) and may still
     * complete into the completion queue: READs given up are delivered, and its completion room given
     * back, only once it is destroyed ({@link #retire}). Lock held, state OPEN.
     */
    private void startRecovery(int suspectSlot, String cause) {
        if (suspectSlot < 0) {
            long oldest = Long.MAX_VALUE;
            for (int s = 0; s < credits; s++) {
                if (slotBusy[s] && slotSeq[s] < oldest) {
                    oldest = slotSeq[s];
                    suspectSlot = s;
                }
            }
        }
        Suspect suspect = null;
        int room = 0;
        if (suspectSlot >= 0) {
            suspect = new Suspect(slotRemote[suspectSlot], slotRkey[suspectSlot], slotLength[suspectSlot],
                    slotLocal[suspectSlot], slotLkey[suspectSlot], slotRequestId[suspectSlot],
                    slotListener[suspectSlot], slotPostNanos[suspectSlot], slotReposts[suspectSlot]);
            releaseSlot(suspectSlot);
            room++;
        }
        Deliveries givenUp = new Deliveries();
        int outstanding = reQueueOutstandingInPostOrder(givenUp);
        room += outstanding;
        QueuePair old = endpoint;
        endpointTag = WorkRequestIds.NO_TAG;
        if (suspect == null && qSize == 0) {
            // nothing to save: the channel fails (destroying the queue pair); the next connect makes a new one
            pendingRoom += room;
            state = FAILING;
            deliverOnceDestroyed(givenUp, ReadStatus.CONNECTION_LOST, old, null);
            failLater(ReadStatus.CONNECTION_LOST, cause + " while idle");
            return;
        }
        state = RECOVERING;
        endpoint = null;
        if (old != null) {
            old.channel(null);
            retiring = old;
            retire(old, room);
        } else {
            node.returnCompletionRoom(room);
        }
        deliverOnceDestroyed(givenUp, ReadStatus.CONNECTION_LOST, old, null);
        LOG.info("queue pair to {} failed ({}); {} READs will be posted again on a new one{}", peer, cause,
                outstanding - givenUp.size(), suspect == null ? "" : " after the peer says whether READ "
                        + suspect.describe() + " was valid");
        Suspect s = suspect;
        node.execute(() -> recover(old, s, cause));
    }

    /** The READ that failed a queue pair, kept aside while the peer is asked about it. */
    private record Suspect(long remote, int rkey, int length, long local, int lkey, long requestId,
                           ReadListener listener, long postNanos, byte reposts) {
        String describe() {
            return "(rkey 0x" + Integer.toHexString(rkey) + ", address 0x" + Long.toHexString(remote) + ", " + length
                    + " bytes)";
        }
    }

    /** READs to complete later with one status (off the hot path: failures only). */
    private static final class Deliveries {
        final List<ReadListener> listeners = new ArrayList<>();
        final List<Long> ids = new ArrayList<>();

        void add(ReadListener l, long id) {
            listeners.add(l);
            ids.add(id);
        }

        int size() {
            return listeners.size();
        }
    }

    /**
     * Puts the outstanding READs back at the head of the queue, oldest first; READs posted again too often
     * go to {@code givenUp} instead. Returns how many were outstanding. Lock held.
     */
    private int reQueueOutstandingInPostOrder(Deliveries givenUp) {
        int n = 0;
        for (int s = 0; s < credits; s++) {
            if (slotBusy[s]) {
                order[n++] = s;
            }
        }
        // Insertion sort by post sequence (at most `credits` entries, off the hot path).
        for (int i = 1; i < n; i++) {
            int v = order[i];
            int j = i - 1;
            while (j >= 0 && slotSeq[order[j]] > slotSeq[v]) {
                order[j + 1] = order[j];
                j--;
            }
            order[j + 1] = v;
        }
        for (int j = n - 1; j >= 0; j--) {
            int s = order[j];
            if (slotReposts[s] < MAX_REPOSTS) {
                enqueueFirst(slotRemote[s], slotRkey[s], slotLength[s], slotLocal[s], slotLkey[s], slotRequestId[s],
                        slotListener[s], slotPostNanos[s], (byte) (slotReposts[s] + 1));
            } else {
                givenUp.add(slotListener[s], slotRequestId[s]);
            }
            releaseSlot(s);
        }
        ringHead = 0;
        ringSize = 0;
        return n;
    }

    /**
     * {@code qp} was taken out of service with {@code room} READs' completion room: the room goes back once
     * it is destroyed (nothing more can complete) and the completions it left in the queue are polled.
     * Until then its flushed completions may still fill the queue, and reusing the room would overrun it.
     */
    private void retire(QueuePair qp, int room) {
        if (room <= 0) {
            return;
        }
        qp.destroyed().whenComplete((v, e) -> node.afterCompletionsPolled(() -> node.returnCompletionRoom(room)));
    }

    /**
     * Completes {@code d}'s READs with {@code status} once {@code a} and {@code b} (either may be null) are
     * destroyed: their buffers go back to a pool then, never while a queue pair that could write into them
     * is alive. At once when they are; else on a worker when the last destroy finishes.
     */
    private void deliverOnceDestroyed(Deliveries d, int status, QueuePair a, QueuePair b) {
        if (d.size() == 0) {
            return;
        }
        Runnable all = () -> {
            for (int i = 0; i < d.size(); i++) {
                node.countRead(status, 0);
                deliver(d.listeners.get(i), d.ids.get(i), status, 0);
            }
        };
        CompletableFuture<Void> da = a == null ? CompletableFuture.completedFuture(null) : a.destroyed();
        CompletableFuture<Void> db = b == null ? CompletableFuture.completedFuture(null) : b.destroyed();
        if (da.isDone() && db.isDone()) {
            all.run();
            return;
        }
        CompletableFuture.allOf(da, db).whenComplete((v, e) -> node.execute(all));
    }

    /** Waits, within {@link QueuePair#CLOSE_WAIT_MS}, for {@code qp} to be destroyed; true when it is. */
    private static boolean awaitDestroyed(QueuePair qp) {
        try {
            qp.destroyed().get(QueuePair.CLOSE_WAIT_MS, TimeUnit.MILLISECONDS);
            return true;
        } catch (java.util.concurrent.TimeoutException | java.util.concurrent.ExecutionException e) {
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /**
     * Off the completion thread: destroys the failed queue pair (READs are posted again only once nothing
     * of it can land any more), asks the peer about the suspect READ (completing it with the peer's answer
     * when the READ was invalid), and connects a new queue pair. When the failed queue pair cannot be
     * destroyed in time, or the peer cannot be asked or reached, the channel fails.
     */
    private void recover(QueuePair old, Suspect suspect, String cause) {
        if (old != null) {
            old.closeQuietly();
            boolean gone = awaitDestroyed(old);
            if (!gone) {
                LOG.warn("queue pair to {} was not destroyed within {} ms; the channel fails, and its READs complete "
                        + "once it is", peer, QueuePair.CLOSE_WAIT_MS);
                if (suspect != null) {
                    Deliveries d = new Deliveries();
                    d.add(suspect.listener(), suspect.requestId());
                    deliverOnceDestroyed(d, ReadStatus.CONNECTION_LOST, old, null);
                }
                fail(ReadStatus.CONNECTION_LOST, cause + ", and the failed queue pair was not destroyed in time");
                return;
            }
            lock.lock();
            try {
                if (retiring == old) {
                    retiring = null;
                }
            } finally {
                lock.unlock();
            }
        }
        if (suspect != null) {
            int why;
            try {
                why = node.diagnose(peer, suspect.rkey(), suspect.remote(), suspect.length());
            } catch (IOException | RuntimeException e) {
                node.countRead(ReadStatus.CONNECTION_LOST, 0);
                deliver(suspect.listener(), suspect.requestId(), ReadStatus.CONNECTION_LOST, 0);
                fail(ReadStatus.CONNECTION_LOST, cause + ", and the peer cannot be asked why: " + e.getMessage());
                return;
            }
            if (why != ReadStatus.SUCCESS) {
                LOG.info("peer {} refused READ {}: {}", peer, suspect.describe(), ReadStatus.describe(why));
                node.countRead(why, 0);
                deliver(suspect.listener(), suspect.requestId(), why, 0);
            } else {
                boolean again;
                lock.lock();
                try {
                    again = state == RECOVERING && suspect.reposts() < MAX_REPOSTS;
                    if (again) {
                        enqueueFirst(suspect.remote(), suspect.rkey(), suspect.length(), suspect.local(),
                                suspect.lkey(), suspect.requestId(), suspect.listener(), suspect.postNanos(),
                                (byte) (suspect.reposts() + 1));
                    }
                } finally {
                    lock.unlock();
                }
                if (!again) {
                    node.countRead(ReadStatus.CONNECTION_LOST, 0);
                    deliver(suspect.listener(), suspect.requestId(), ReadStatus.CONNECTION_LOST, 0);
                }
            }
        }
        QueuePair fresh;
        try {
            fresh = node.openEndpoint(peer, rdmaTarget, node.connectTimeoutMs());
        } catch (IOException | RuntimeException e) {
            fail(ReadStatus.CONNECTION_LOST, cause + ", and reconnecting failed: " + e.getMessage());
            return;
        }
        boolean unused;
        lock.lock();
        try {
            unused = state != RECOVERING;
            if (!unused) {
                attach(fresh);
                node.countReconnect();
                drain();
            }
        } finally {
            lock.unlock();
        }
        if (unused) {
            fresh.closeQuietly(); // never under the lock: closing may wait for the device's cm thread
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

    /**
     * Fails the channel when a READ has been outstanding or queued longer than the request timeout; when
     * READs have made no progress for the stall interval, asks the peer whether the oldest one is valid.
     */
    void checkTimeouts(long now, long keepAliveNanos) {
        String late = null;
        Suspect stalled = null;
        long stalledSeq = -1;
        QueuePair keepAlive = null;
        lock.lock();
        try {
            if (state == CLOSED) {
                return;
            }
            if (state == OPEN && endpoint != null && now - lastKeepAliveNanos > keepAliveNanos) {
                lastKeepAliveNanos = now;
                keepAlive = endpoint;
            }
            int oldest = -1;
            for (int s = 0; s < credits; s++) {
                if (slotBusy[s]) {
                    // Counted from the later of its post and the channel's last progress: a long queue
                    // that moves is not a timeout.
                    if (now - Math.max(slotPostNanos[s], lastProgressNanos) > requestTimeoutNanos) {
                        late = "a READ was outstanding";
                    }
                    if (oldest < 0 || slotSeq[s] < slotSeq[oldest]) {
                        oldest = s;
                    }
                }
            }
            if (late == null && qSize > 0
                    && now - Math.max(qPostNanos[qHead], lastProgressNanos) > requestTimeoutNanos) {
                late = "a READ waited to be posted";
            }
            if (late == null && state == OPEN && oldest >= 0 && !stallCheckRunning
                    && now - lastProgressNanos > stallNanos) {
                stallCheckRunning = true;
                stalledSeq = slotSeq[oldest];
                stalled = new Suspect(slotRemote[oldest], slotRkey[oldest], slotLength[oldest], slotLocal[oldest],
                        slotLkey[oldest], slotRequestId[oldest], slotListener[oldest], slotPostNanos[oldest],
                        slotReposts[oldest]);
            }
        } finally {
            lock.unlock();
        }
        if (keepAlive != null) {
            node.sendKeepAlive(this, peer, keepAlive.localAddress());
        }
        if (late != null) {
            fail(ReadStatus.TIMEOUT, late + " longer than spark.shuffle.rdma.requestTimeout ("
                    + TimeUnit.NANOSECONDS.toMillis(requestTimeoutNanos) + " ms)");
        } else if (stalled != null) {
            Suspect s = stalled;
            long seq = stalledSeq;
            node.execute(() -> checkStall(s, seq));
        }
    }

    /**
     * Off the timer: asks the peer about a READ that has made no progress; an invalid one fails the queue
     * pair. Whatever the asking throws, the next stall is checked again.
     */
    private void checkStall(Suspect s, long seq) {
        int why = ReadStatus.SUCCESS;
        try {
            why = node.diagnose(peer, s.rkey(), s.remote(), s.length());
        } catch (IOException | RuntimeException e) {
            LOG.debug("cannot ask {} about a stalled READ: {}", peer, e.toString()); // the request timeout stays in charge
        } finally {
            lock.lock();
            try {
                stallCheckRunning = false;
                if (why == ReadStatus.SUCCESS || state != OPEN) {
                    lastProgressNanos = System.nanoTime(); // valid, just slow: check again one interval later
                } else {
                    for (int slot = 0; slot < credits; slot++) {
                        if (slotBusy[slot] && slotSeq[slot] == seq) {
                            startRecovery(slot, "no completion for " + TimeUnit.NANOSECONDS.toMillis(stallNanos)
                                    + " ms, and the peer says READ " + s.describe() + " is invalid: "
                                    + ReadStatus.describe(why));
                            break;
                        }
                    }
                }
            } finally {
                lock.unlock();
            }
        }
    }

    /**
     * What became of a keep-alive: the peer's accepting node reaps a queue pair no keep-alive named for its
     * idle timeout. A channel with nothing outstanding whose peer answered none of the last two closes
     * (posting to it then says IDLE_CLOSED: connect again); with READs outstanding the request timeout
     * decides.
     */
    void keepAliveAnswered(boolean answered, String why) {
        boolean close;
        lock.lock();
        try {
            keepAlivesUnanswered = answered ? 0 : keepAlivesUnanswered + 1;
            close = keepAlivesUnanswered >= 2 && state == OPEN && freeTop == credits && qSize == 0;
        } finally {
            lock.unlock();
        }
        if (close) {
            fail(ReadStatus.IDLE_CLOSED, "the peer answered no keep-alive (" + why + ")");
        }
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
                startRecovery(-1, "the queue pair disconnected");
            }
        } finally {
            lock.unlock();
        }
    }

    private void failLater(int status, String why) {
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
            int outstanding = 0;
            for (int s = 0; s < credits; s++) {
                if (slotBusy[s]) {
                    d.add(slotListener[s], slotRequestId[s]);
                    releaseSlot(s);
                    outstanding++;
                }
            }
            room = outstanding + pendingRoom;
            pendingRoom = 0;
            ringHead = 0;
            ringSize = 0;
            while (qSize > 0) {
                d.add(qListener[qHead], qRequestId[qHead]);
                qListener[qHead] = null;
                qHead = (qHead + 1) & (qRemote.length - 1);
                qSize--;
            }
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
            retire(ep, room);
            ep.closeQuietly();
        } else {
            node.returnCompletionRoom(room); // no queue pair held them
        }
        if (old != null) {
            // Recovery had not destroyed it yet (it may be at it): closed off this thread, which may be the timer;
            // the READs are delivered once it is destroyed, whoever destroys it.
            node.execute(old::closeQuietly);
        }
        deliverOnceDestroyed(d, status, ep, old);
    }

    @Override
    public void close() {
        fail(ReadStatus.CHANNEL_CLOSED, "closed");
    }

    private void deliver(ReadListener l, long requestId, int status, int len) {
        try {
            l.onReadComplete(requestId, status, len);
        } catch (RuntimeException e) {
            LOG.error("READ listener failed for request {} on channel to {}", requestId, peer, e);
        }
    }

    private static String wcName(int s) {
        return WcStatus.name(s);
    }

    @Override
    public String toString() {
        return "VerbsChannel[" + peer + " via " + rdmaTarget + "]";
    }
}
