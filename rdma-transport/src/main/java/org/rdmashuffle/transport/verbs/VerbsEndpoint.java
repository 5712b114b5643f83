package org.rdmashuffle.transport.verbs;

import com.ibm.disni.RdmaActiveEndpoint;
import com.ibm.disni.RdmaActiveEndpointGroup;
import com.ibm.disni.verbs.IbvSendWR;
import com.ibm.disni.verbs.IbvSge;
import com.ibm.disni.verbs.IbvWC;
import com.ibm.disni.verbs.RdmaCmEvent;
import com.ibm.disni.verbs.RdmaCmId;
import com.ibm.disni.verbs.SVCPostSend;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.LinkedList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * One RC queue pair and its rdma_cm id, through DiSNI ({@link DisniDevice}). Client endpoints belong to a {@link VerbsChannel}, which gets
 * their completions; server endpoints (accepted) only let a peer READ this node's regions. DiSNI's
 * own {@code connect} waits without a bound, so a connect in progress is interrupted when rdma_cm
 * reports it failed (rejected, unreachable, address or route error) or the connect timeout passes.
 *
 * <p>DiSNI hands a work completion to the endpoint whose queue pair has the completion's qp_num, with
 * no tag of its own: a completion a destroyed queue pair left in the queue reaches the endpoint that
 * reuses its number. The channel tells them apart by the queue pair tag in the work request id
 * ({@link WorkRequestIds}); this class passes the id on whole.
 */
final class VerbsEndpoint extends RdmaActiveEndpoint implements QueuePair {
    private static final int ADDR_ERROR = RdmaCmEvent.EventType.RDMA_CM_EVENT_ADDR_ERROR.ordinal();
    private static final int ROUTE_ERROR = RdmaCmEvent.EventType.RDMA_CM_EVENT_ROUTE_ERROR.ordinal();
    private static final int CONNECT_ERROR = RdmaCmEvent.EventType.RDMA_CM_EVENT_CONNECT_ERROR.ordinal();
    private static final int UNREACHABLE = RdmaCmEvent.EventType.RDMA_CM_EVENT_UNREACHABLE.ordinal();
    private static final int REJECTED = RdmaCmEvent.EventType.RDMA_CM_EVENT_REJECTED.ordinal();
    private static final int DISCONNECTED = RdmaCmEvent.EventType.RDMA_CM_EVENT_DISCONNECTED.ordinal();
    private static final int DEVICE_REMOVAL = RdmaCmEvent.EventType.RDMA_CM_EVENT_DEVICE_REMOVAL.ordinal();
    private static final int ESTABLISHED = RdmaCmEvent.EventType.RDMA_CM_EVENT_ESTABLISHED.ordinal();

    private final VerbsNode node;
    private final DisniDevice device;
    private final boolean serverSide;
    private volatile VerbsChannel channel;
    /** Work request lists by length, built once for this queue pair and rewritten per post; guarded by postLock. */
    private SVCPostSend[] chains = new SVCPostSend[0];
    private final Object postLock = new Object();
    private Thread connecting;
    private String failure;
    private boolean connectOver;
    private boolean established;
    private boolean acceptAborted;
    /** A server endpoint's admission ({@link VerbsNode#admitQueuePair}), from its init hook on. */
    private volatile AcceptedQueuePairs.Entry entry;
    private final DestroyOnce destroy;

    VerbsEndpoint(VerbsNode node, DisniDevice device, RdmaActiveEndpointGroup<VerbsEndpoint> group, RdmaCmId id,
                  boolean serverSide) throws IOException {
        super(group, id, serverSide);
        this.node = node;
        this.device = device;
        this.serverSide = serverSide;
        this.destroy = new DestroyOnce(node::deviceFailed);
    }

    @Override
    public VerbsChannel channel() {
        return channel;
    }

    @Override
    public void channel(VerbsChannel c) {
        channel = c;
    }

    @Override
    public void post(ReadChain chain, int k) throws IOException {
        synchronized (postLock) {
            if (chains == null) {
                throw new IOException("queue pair closed");
            }
            SVCPostSend c = chain(k);
            for (int j = 0; j < k; j++) {
                SVCPostSend.SendWRMod wr = c.getWrMod(j);
                wr.setWr_id(chain.wrId[j]);
                wr.setSend_flags(chain.signaled[j] ? IbvSendWR.IBV_SEND_SIGNALED : 0);
                SVCPostSend.SgeMod sge = wr.getSgeMod(0);
                sge.setAddr(chain.local[j]);
                sge.setLength(chain.length[j]);
                sge.setLkey(chain.lkey[j]);
                SVCPostSend.RdmaMod rdma = wr.getRdmaMod();
                rdma.setRemote_addr(chain.remote[j]);
                rdma.setRkey(chain.rkey[j]);
            }
            c.execute();
        }
    }

    /** The list of {@code k} READ work requests, built once for this queue pair. postLock held. */
    private SVCPostSend chain(int k) throws IOException {
        if (k >= chains.length) {
            chains = java.util.Arrays.copyOf(chains, Math.max(k + 1, chains.length * 2));
        }
        SVCPostSend c = chains[k];
        if (c == null) {
            List<IbvSendWR> wrs = new ArrayList<>(k);
            for (int j = 0; j < k; j++) {
                IbvSge sge = new IbvSge();
                LinkedList<IbvSge> sges = new LinkedList<>();
                sges.add(sge);
                IbvSendWR wr = new IbvSendWR();
                wr.setSg_list(sges);
                wr.setOpcode(IbvSendWR.IBV_WR_RDMA_READ);
                wr.setSend_flags(IbvSendWR.IBV_SEND_SIGNALED);
                wrs.add(wr);
            }
            c = postSend(new LinkedList<>(wrs));
            chains[k] = c;
        }
        return c;
    }

    private void freeChains() {
        synchronized (postLock) {
            if (chains == null) {
                return;
            }
            for (SVCPostSend c : chains) {
                if (c != null) {
                    c.free();
                }
            }
            chains = null;
        }
    }

    /**
     * Runs once the queue pair exists and before rdma_cm accepts or connects it. A server endpoint
     * whose connect request no authenticated peer announced ({@link VerbsNode#mayAccept}) destroys its
     * queue pair here — still in INIT, never RTR or RTS — and fails the accept; closing it then
     * destroys the rdma_cm id, which rejects the connect request.
     */
    @Override
    protected synchronized void init() throws IOException {
        super.init();
        if (!serverSide) {
            return;
        }
        java.net.SocketAddress from = getDstAddr();
        // DiSNI 2.1 hands no private data to the accepting side: admission by source address only
        AcceptedQueuePairs.Entry e = node.admitQueuePair(from instanceof InetSocketAddress a ? a : null, null);
        if (e == null) {
            getIdPriv().destroyQP();
            node.execute(this::closeQuietly); // once DiSNI's accept has let go of it
            throw new IOException("queue pair from " + from + " refused (a cap, or not announced by an "
                    + "authenticated peer)");
        }
        entry = e;
        // DiSNI's accept waits for ESTABLISHED without a bound, on the node's only acceptor thread: a peer
        // that goes away mid-handshake must not stop every later accept.
        long timeoutMs = node.connectTimeoutMs();
        node.schedule(() -> abortAccept("no connection within " + timeoutMs + " ms"), timeoutMs);
        // DiSNI's accept may also throw after this hook admitted the queue pair (rdma_accept failing): the
        // endpoint then never reaches the node's acceptor, and nothing else would free its admission.
        node.schedule(this::closeIfNeverAccepted, 2 * timeoutMs);
    }

    /** Set by the node's acceptor when DiSNI's accept handed this server endpoint over. */
    private volatile boolean handedOver;

    /** The node's acceptor got this endpoint from DiSNI's accept. */
    void handedOver() {
        handedOver = true;
    }

    /** A server endpoint DiSNI's accept never handed over: closed, and its admission freed. */
    private void closeIfNeverAccepted() {
        if (!handedOver) {
            node.noteAbortedAccept("DiSNI's accept never returned the queue pair it admitted; closed");
            closeQuietly();
        }
    }

    /**
     * Ends DiSNI's wait in a server endpoint's accept when the connection will not come: a synthetic
     * DISCONNECTED moves its state past "connected", so accept returns it unconnected and the node's
     * acceptor closes it.
     */
    private void abortAccept(String why) {
        synchronized (this) {
            if (!serverSide || established || acceptAborted) {
                return;
            }
            acceptAborted = true;
        }
        try {
            super.dispatchCmEvent(new RdmaCmEvent(DISCONNECTED, null, null));
            node.noteAbortedAccept(why);
        } catch (IOException e) {
            node.noteAbortedAccept(why + " (and ending the accept failed: " + e + ")");
        }
    }

    /** Whether rdma_cm reported this endpoint's connection established. */
    synchronized boolean established() {
        return established;
    }

    /**
     * A server endpoint accept returned connected: records it among the node's accepted queue pairs.
     *
     * @return false when it went away before it was recorded (a DISCONNECTED that came first): close it
     */
    boolean recordConnected() {
        AcceptedQueuePairs.Entry e = entry;
        return e == null || e.connected(() -> node.execute(this::closeQuietly), System.nanoTime());
    }

    /**
     * A server endpoint disconnected: it leaves the node's accepted queue pairs.
     *
     * @return whether it had been recorded connected (the caller closes it; else accept's caller does)
     */
    boolean recordGone() {
        AcceptedQueuePairs.Entry e = entry;
        return e != null && e.gone();
    }

    @Override
    public CompletableFuture<Void> destroyed() {
        return destroy.destroyed();
    }

    @Override
    public InetSocketAddress localAddress() {
        try {
            return getSrcAddr() instanceof InetSocketAddress a ? a : null;
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    /** Runs on DiSNI's completion thread; {@code wc} is reused by DiSNI, so only its fields are passed on. */
    @Override
    public void dispatchCqEvent(IbvWC wc) {
        device.events().onCompletion(channel, this, wc.getWr_id(), wc.getStatus());
    }

    @Override
    public synchronized void dispatchCmEvent(RdmaCmEvent event) throws IOException {
        super.dispatchCmEvent(event);
        int t = event.getEvent();
        if (t == ESTABLISHED) {
            established = true;
        }
        if (serverSide && !established && (t == CONNECT_ERROR || t == UNREACHABLE || t == REJECTED)) {
            abortAccept("rdma_cm " + RdmaCmEvent.EventType.values()[t].name());
            return;
        }
        if (t == ADDR_ERROR || t == ROUTE_ERROR || t == CONNECT_ERROR || t == UNREACHABLE || t == REJECTED) {
            abortConnect(RdmaCmEvent.EventType.values()[t].name().substring("RDMA_CM_EVENT_".length())
                    .toLowerCase(java.util.Locale.ROOT).replace('_', ' '));
        } else if (t == DISCONNECTED || t == DEVICE_REMOVAL) {
            abortConnect("disconnected");
            if (serverSide) {
                if (t == DEVICE_REMOVAL) {
                    device.events().onDeviceRemoved();
                }
                device.acceptedDisconnected(this);
            } else {
                device.events().onDisconnected(this, t == DEVICE_REMOVAL);
            }
        }
    }

    /**
     * Connects within {@code timeoutMs}.
     *
     * @throws IOException naming why (the rdma_cm event, or the timeout)
     */
    void connectWithin(java.net.InetSocketAddress target, long timeoutMs) throws IOException {
        synchronized (this) {
            connecting = Thread.currentThread();
        }
        java.util.concurrent.ScheduledFuture<?> timer = node.schedule(
                () -> abortConnect("no connection within " + timeoutMs + " ms (spark.shuffle.rdma.connectTimeout)"),
                timeoutMs);
        boolean interrupted = false;
        try {
            connect(target, (int) Math.min(Integer.MAX_VALUE, timeoutMs));
            if (!isConnected()) {
                throw new IOException("rdma_cm connect to " + target + " ended without a connection");
            }
        } catch (InterruptedException e) {
            interrupted = true;
            String why = failureOr(null);
            if (why == null) {
                Thread.currentThread().interrupt(); // the caller's own interrupt
            }
            throw new IOException("rdma_cm connect to " + target + " failed: " + (why == null ? "interrupted" : why));
        } catch (IOException e) {
            throw new IOException("rdma_cm connect to " + target + " failed: " + failureOr(e.getMessage()), e);
        } catch (Exception e) {
            throw new IOException("rdma_cm connect to " + target + " failed: " + failureOr(e.toString()), e);
        } finally {
            timer.cancel(false);
            boolean aborted;
            synchronized (this) {
                connecting = null;
                connectOver = true;
                aborted = failure != null;
            }
            // Our own abort interrupted this thread; a caller's interrupt is kept.
            if (aborted && !interrupted) {
                Thread.interrupted();
            }
        }
    }

    private synchronized String failureOr(String other) {
        return failure != null ? failure : other;
    }

    private synchronized void abortConnect(String why) {
        if (connectOver || connecting == null) {
            return;
        }
        if (failure == null) {
            failure = why;
        }
        connecting.interrupt();
    }

    /**
     * Closes, never throwing; DiSNI waits at most a second for the disconnect. A second caller waits for
     * the first one's close (bounded). {@link #destroyed} completes when DiSNI's close returned; when it
     * threw, the queue pair may be alive, and it never completes.
     */
    @Override
    public void closeQuietly() {
        if (!destroy.begin(CLOSE_WAIT_MS)) {
            return; // another thread closed it, or is still at it after the bound
        }
        AcceptedQueuePairs.Entry e = entry;
        if (e != null) {
            e.gone();
        }
        freeChains();
        boolean ok = false;
        try {
            close();
            ok = true;
        } catch (Exception ex) {
            node.logClose(this, ex);
        } finally {
            destroy.done(ok);
        }
    }
}
