package org.rdmashuffle.transport.verbs;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.rdmashuffle.transport.verbs.RdmaCore.getInt;
import static org.rdmashuffle.transport.verbs.RdmaCore.getLong;
import static org.rdmashuffle.transport.verbs.RdmaCore.state;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * One RC queue pair and its rdma_cm id through {@code java.lang.foreign}. A client queue pair posts
 * through its {@link ReadWorkRequests}, allocated once when its queue pair is created: nothing is
 * allocated per READ.
 *
 * <p>Its rdma_cm events arrive on the device's connection-manager thread, which handles them holding the
 * device's cm lock and this object's monitor (in that order); every native call on its id holds this
 * monitor, none is made once closed, and the id and queue pair are destroyed under the cm lock alone,
 * so that no event of theirs is being reported or handled meanwhile.
 *
 * <p>Closing is done once, by the first caller; a second caller waits (bounded) until it is done, and
 * {@link #destroyed()} completes when the queue pair and its id are destroyed: only then can no READ
 * posted on it land any more.
 */
final class FfmQueuePair implements QueuePair {
    private final FfmDevice device;
    private final RdmaCore core;
    private final boolean serverSide;
    /** An accepted queue pair's place among the node's (caps, liveness); null for a client one. */
    private final AcceptedQueuePairs.Entry entry;
    private final CompletableFuture<Void> connected = new CompletableFuture<>();
    private final DestroyOnce destroy;
    private volatile VerbsChannel channel;
    // Guarded by this.
    private long id;
    private int qpNum = -1;
    private boolean hasQp;
    private boolean established;
    private boolean closed;
    private boolean acceptAborted;
    private int resolveTimeoutMs;
    /** What a client's connect request carries (its proof of the secret), or null. */
    private byte[] privateData;
    /** A client's own rdma_cm address once connected. */
    private volatile InetSocketAddress local;
    // The work request list: guarded by postLock.
    private final Object postLock = new Object();
    private ReadWorkRequests requests;

    /** @param entry for an accepted queue pair, its admission ({@link VerbsNode#admitQueuePair}); else null */
    FfmQueuePair(FfmDevice device, boolean serverSide, AcceptedQueuePairs.Entry entry) {
        this.device = device;
        this.core = device.core;
        this.serverSide = serverSide;
        this.entry = entry;
        this.destroy = new DestroyOnce(device.node::deviceFailed);
    }

    AcceptedQueuePairs.Entry entry() {
        return entry;
    }

    /** What the connect request is to carry (a client's proof of the secret). Before {@link #resolve}. */
    synchronized void privateData(byte[] data) {
        this.privateData = data == null ? null : data.clone();
    }

    @Override
    public CompletableFuture<Void> destroyed() {
        return destroy.destroyed();
    }

    @Override
    public InetSocketAddress localAddress() {
        return local;
    }

    boolean serverSide() {
        return serverSide;
    }

    synchronized void start(long cmId) {
        this.id = cmId;
    }

    @Override
    public VerbsChannel channel() {
        return channel;
    }

    @Override
    public void channel(VerbsChannel c) {
        channel = c;
    }

    // ---- connect (client) ----

    synchronized void resolve(MemorySegment src, MemorySegment dst, int timeoutMs) throws IOException {
        if (closed) {
            throw new IOException("rdma_cm connect failed: closed");
        }
        resolveTimeoutMs = Math.max(1, timeoutMs);
        int rc;
        try {
            rc = (int) core.resolveAddr.invokeExact(state(), RdmaCore.at(id), src, dst, resolveTimeoutMs);
        } catch (Throwable t) {
            throw new IOException("rdma_resolve_addr: " + t, t);
        }
        if (rc != 0) {
            throw new IOException("rdma_resolve_addr: " + core.lastError());
        }
    }

    void awaitConnected(InetSocketAddress target, long timeoutMs) throws IOException {
        try {
            connected.get(timeoutMs, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            closeQuietly();
            throw new IOException("rdma_cm connect to " + target + " failed: no connection within " + timeoutMs
                    + " ms (spark.shuffle.rdma.connectTimeout)");
        } catch (ExecutionException e) {
            closeQuietly();
            throw new IOException("rdma_cm connect to " + target + " failed: " + e.getCause().getMessage());
        } catch (InterruptedException e) {
            closeQuietly();
            Thread.currentThread().interrupt();
            throw new IOException("rdma_cm connect to " + target + " failed: interrupted");
        }
    }

    /** Creates this id's queue pair on the device's protection domain and completion queue. this held. */
    private void createQp(int maxSendWr) throws IOException {
        long verbs = getLong(id + RdmaCore.ID_VERBS);
        if (verbs != device.context) {
            throw new IOException("the route leaves from another RDMA device than this node's listener");
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment attr = a.allocate(RdmaCore.QPIA_SIZE, 8);
            attr.set(java.lang.foreign.ValueLayout.ADDRESS, RdmaCore.QPIA_SEND_CQ, device.cq);
            attr.set(java.lang.foreign.ValueLayout.ADDRESS, RdmaCore.QPIA_RECV_CQ, device.cq);
            attr.set(JAVA_INT, RdmaCore.QPIA_CAP_MAX_SEND_WR, maxSendWr);
            attr.set(JAVA_INT, RdmaCore.QPIA_CAP_MAX_RECV_WR, 1);
            attr.set(JAVA_INT, RdmaCore.QPIA_CAP_MAX_SEND_SGE, 1);
            attr.set(JAVA_INT, RdmaCore.QPIA_CAP_MAX_RECV_SGE, 1);
            attr.set(JAVA_INT, RdmaCore.QPIA_QP_TYPE, RdmaCore.IBV_QPT_RC);
            attr.set(JAVA_INT, RdmaCore.QPIA_SQ_SIG_ALL, 0);
            int rc;
            try {
                rc = (int) core.createQp.invokeExact(state(), RdmaCore.at(id), devicePd(), attr);
            } catch (Throwable t) {
                throw new IOException("rdma_create_qp: " + t, t);
            }
            if (rc != 0) {
                throw new IOException("rdma_create_qp: " + core.lastError());
            }
        }
        hasQp = true;
        long qp = getLong(id + RdmaCore.ID_QP);
        qpNum = getInt(qp + RdmaCore.QP_QP_NUM);
        if (!serverSide) {
            synchronized (postLock) {
                requests = new ReadWorkRequests(core, RdmaCore.at(qp), device.postSendFn, maxSendWr);
            }
            device.completionsFor(qpNum, this);
        }
    }

    /** The protection domain to create the queue pair in: an accepted one's realm's, else the device's default one. */
    private MemorySegment devicePd() {
        VerbsDevice.Domain d = entry == null ? null : entry.domain();
        return d == null ? device.pd() : ((FfmDevice.FfmDomain) d).pd;
    }

    /** On the connection-manager thread. */
    void onCmEvent(int type, int status) {
        boolean disconnected = false;
        synchronized (this) {
            if (closed) {
                return;
            }
            if (serverSide) {
                if (type == RdmaCore.EV_ESTABLISHED) {
                    if (!acceptAborted) {
                        established = true;
                        device.acceptedEstablished(this);
                    }
                } else if (type == RdmaCore.EV_DISCONNECTED || type == RdmaCore.EV_DEVICE_REMOVAL
                        || type == RdmaCore.EV_CONNECT_ERROR || type == RdmaCore.EV_UNREACHABLE
                        || type == RdmaCore.EV_REJECTED) {
                    acceptAborted = !established;
                    device.acceptedGone(this);
                }
                return;
            }
            try {
                switch (type) {
                    case RdmaCore.EV_ADDR_RESOLVED: {
                        int rc = (int) core.resolveRoute.invokeExact(state(), RdmaCore.at(id), resolveTimeoutMs);
                        if (rc != 0) {
                            connectFailed("rdma_resolve_route: " + core.lastError());
                        }
                        break;
                    }
                    case RdmaCore.EV_ROUTE_RESOLVED: {
                        createQp(device.credits);
                        int rc = connectWithPrivateData();
                        if (rc != 0) {
                            connectFailed("rdma_connect: " + core.lastError());
                        }
                        break;
                    }
                    case RdmaCore.EV_ESTABLISHED:
                        established = true;
                        local = SocketAddresses.read(id + RdmaCore.ID_SRC_ADDR);
                        connected.complete(null);
                        break;
                    case RdmaCore.EV_DISCONNECTED:
                    case RdmaCore.EV_DEVICE_REMOVAL:
                        if (established) {
                            disconnected = true;
                        } else {
                            connectFailed("disconnected");
                        }
                        break;
                    case RdmaCore.EV_ADDR_ERROR:
                    case RdmaCore.EV_ROUTE_ERROR:
                    case RdmaCore.EV_CONNECT_ERROR:
                    case RdmaCore.EV_UNREACHABLE:
                    case RdmaCore.EV_REJECTED:
                        connectFailed(eventName(type) + statusText(type, status));
                        break;
                    default:
                        break;
                }
            } catch (IOException e) {
                connectFailed(e.getMessage());
            } catch (Throwable t) {
                connectFailed(t.toString());
            }
        }
        if (disconnected) {
            device.node.queuePairDisconnected(this);
        }
    }

    /**
     * rdma_connect with the device's parameters, and this queue pair's private data when it has some
     * (librdmacm copies it into the request before returning). this held, on the cm thread.
     */
    private int connectWithPrivateData() throws Throwable {
        if (privateData == null) {
            return (int) core.connect.invokeExact(state(), RdmaCore.at(id), device.connParam);
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment cp = a.allocate(RdmaCore.CP_SIZE, 8);
            cp.copyFrom(device.connParam);
            MemorySegment pd = a.allocate(privateData.length, 8);
            pd.copyFrom(MemorySegment.ofArray(privateData));
            cp.set(ADDRESS, RdmaCore.CP_PRIVATE_DATA, pd);
            cp.set(JAVA_BYTE, RdmaCore.CP_PRIVATE_DATA_LEN, (byte) privateData.length);
            return (int) core.connect.invokeExact(state(), RdmaCore.at(id), cp);
        }
    }

    private String eventName(int type) {
        String n = core.eventName(type);
        if (n.startsWith("RDMA_CM_EVENT_")) {
            n = n.substring("RDMA_CM_EVENT_".length());
        }
        return n.toLowerCase(Locale.ROOT).replace('_', ' ');
    }

    private void connectFailed(String why) {
        connected.completeExceptionally(new IOException(why));
    }

    // ---- accept (server) ----

    /** Creates the queue pair of an admitted connect request and accepts it. On the cm thread. */
    synchronized void accept() throws IOException {
        if (closed) {
            throw new IOException("closed");
        }
        createQp(1); // it posts nothing: peers READ through it
        int rc;
        try {
            rc = (int) core.accept.invokeExact(state(), RdmaCore.at(id), device.connParam);
        } catch (Throwable t) {
            throw new IOException("rdma_accept: " + t, t);
        }
        if (rc != 0) {
            throw new IOException("rdma_accept: " + core.lastError());
        }
    }

    /** Ends an accept whose connection did not come within the connect timeout. */
    void abortAccept(String why) {
        synchronized (this) {
            if (closed || established) {
                return;
            }
            acceptAborted = true;
        }
        device.node.noteAbortedAccept(why);
        closeQuietly();
    }

    // ---- data path ----

    @Override
    public void post(ReadChain chain, int k) throws IOException {
        synchronized (postLock) {
            if (requests == null) {
                throw new IOException("queue pair closed");
            }
            requests.post(chain, k);
        }
    }

    @Override
    public void closeQuietly() {
        if (!destroy.begin(CLOSE_WAIT_MS)) {
            return; // another thread destroyed it, or is still at it after the bound (destroyed() tells)
        }
        long cmId;
        int num;
        boolean disconnect;
        boolean destroyQp;
        synchronized (this) {
            closed = true;
            cmId = id;
            num = qpNum;
            disconnect = established;
            destroyQp = hasQp;
            connected.completeExceptionally(new IOException("closed"));
            synchronized (postLock) {
                if (requests != null) {
                    requests.close();
                    requests = null;
                }
            }
        }
        boolean done = false;
        try {
            if (entry != null) {
                entry.gone();
            }
            device.forget(this, cmId, num);
            // Under the device's cm lock: librdmacm itself moves a queue pair's state while it reports an
            // event (connect response, reject), and that must not meet the queue pair being destroyed.
            done = cmId == 0 || device.destroyId(cmId, disconnect, destroyQp);
        } finally {
            destroy.done(done);
        }
        if (done && entry != null) {
            entry.destroyed(); // no queue pair is left in its realm's protection domain (a failed destroy keeps it)
        }
    }

    /**
     * What an rdma_cm event's status says: a negative errno from the kernel, or for a reject the peer's
     * reason (IB CM reject 28, "consumer defined": the peer's node refused the queue pair).
     */
    private String statusText(int type, int status) {
        if (status == 0) {
            return "";
        }
        if (status < 0) {
            return " (" + device.core.describe(-status) + ")";
        }
        if (type == RdmaCore.EV_REJECTED && status == 28) {
            return " (status 28: the peer refused the queue pair; it admits only queue pairs its authenticated "
                    + "peers announce, so check that spark.authenticate is the same on both, or its listener was "
                    + "closing)";
        }
        return " (status " + status + ")";
    }

    @Override
    public String toString() {
        return "FfmQueuePair[qp " + qpNum + (serverSide ? ", accepted" : "") + "]";
    }
}
