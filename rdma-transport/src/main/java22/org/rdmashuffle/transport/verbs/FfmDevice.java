package org.rdmashuffle.transport.verbs;

import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.rdmashuffle.transport.verbs.RdmaCore.getInt;
import static org.rdmashuffle.transport.verbs.RdmaCore.getLong;
import static org.rdmashuffle.transport.verbs.RdmaCore.state;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The verbs device reached through {@code java.lang.foreign} ({@link RdmaCore}): an rdma_cm event
 * channel with its own thread ({@link FfmConnectionManager}) and a listener ({@link FfmListener}), the
 * protection domain ({@link FfmMemory}; plus one per realm, {@link #openDomain}) and one completion queue (with a completion channel) on the
 * listener's device, polled by the completion thread ({@link FfmCompletions}), the queue pairs of both
 * ({@link FfmQueuePairs}), and the device's port states ({@link LocalPorts}: whose failure a failure is).
 * This class opens them, and releases them in reverse order.
 */
final class FfmDevice implements VerbsDevice {
    private static final Logger LOG = LoggerFactory.getLogger(FfmDevice.class);

    final RdmaCore core;
    final VerbsNode node;
    private final Arena arena = Arena.ofShared();
    private final Deque<Runnable> release = new ArrayDeque<>();
    private final int eventTimeoutMs;
    final int credits;
    /** Read side: a connect or registration in progress; write side: close, which frees what they use. */
    private final ReentrantReadWriteLock lifecycle = new ReentrantReadWriteLock();
    final long context;
    private final MemorySegment pd;
    final MemorySegment cq;
    final MemorySegment postSendFn;
    /** rdma_conn_param every connect and accept uses. */
    final MemorySegment connParam;
    private final String name;
    private final InetAddress address;
    private final int port;
    private final int responderResources;
    private final int initiatorDepth;
    private final FfmQueuePairs queuePairs = new FfmQueuePairs();
    /** The realms' protection domains allocated now ({@link #openDomain}). */
    private final java.util.Set<FfmDomain> domains = java.util.concurrent.ConcurrentHashMap.newKeySet();
    private final FfmConnectionManager cm;
    private final FfmCompletions completions;
    private final LocalPorts ports;
    private volatile boolean closed;

    FfmDevice(VerbsNode node, RdmaCore core, InetSocketAddress bind, QueuePairParameters queuePairs, int credits,
              int completionQueueSize, int eventTimeoutMs) throws IOException {
        this.node = node;
        this.core = core;
        this.credits = credits;
        this.eventTimeoutMs = eventTimeoutMs;
        try {
            MemorySegment eventChannel = (MemorySegment) core.createEventChannel.invokeExact(state());
            if (eventChannel.equals(MemorySegment.NULL)) {
                throw new TransportException("verbs: rdma_create_event_channel failed: " + core.lastError()
                        + " (is rdma_ucm loaded? /dev/infiniband/rdma_cm must exist)");
            }
            release.push(() -> call(() -> {
                core.destroyEventChannel.invokeExact(eventChannel);
            }));
            int eventFd = getInt(eventChannel.address() + RdmaCore.EVENT_CHANNEL_FD);
            nonBlocking(eventFd);
            cm = new FfmConnectionManager(this, arena, this.queuePairs, eventChannel, eventFd, eventTimeoutMs);
            release.push(cm.listener()::destroy);
            context = cm.listener().bind(bind);
            if (context == 0) {
                throw new TransportException("verbs: no RDMA device serves " + bind.getHostString()
                        + " (rdma_cm bound no device; bind to the address of an RDMA-capable interface)");
            }
            name = deviceName(context);
            ports = new LocalPorts(name, LocalPorts.sysfs(name), node::deviceFailed);
            MemorySegment attr = arena.allocate(RdmaCore.DA_SIZE, 8);
            int rc = (int) core.queryDevice.invokeExact(RdmaCore.at(context), attr);
            if (rc != 0) {
                throw new TransportException("verbs: ibv_query_device on " + name + " failed: " + core.describe(rc));
            }
            int maxQpWr = attr.get(JAVA_INT, RdmaCore.DA_MAX_QP_WR);
            int maxCqe = attr.get(JAVA_INT, RdmaCore.DA_MAX_CQE);
            if (credits > maxQpWr) {
                throw new TransportException("verbs: " + name + " takes at most " + maxQpWr + " work requests per "
                        + "queue pair (max_qp_wr), fewer than the " + credits + " READs a channel keeps in flight: lower "
                        + "spark.shuffle.rdma.maxReadsInFlightPerPeer or spark.shuffle.rdma.verbs.maxQpReadAtoms");
            }
            if (completionQueueSize > maxCqe) {
                throw new TransportException("verbs: " + name + " takes at most " + maxCqe + " completion queue "
                        + "entries (max_cqe): lower spark.shuffle.rdma.verbs.completionQueueSize (" + completionQueueSize
                        + ")");
            }
            responderResources = Math.max(1, Math.min(queuePairs.readDepth(),
                    attr.get(JAVA_INT, RdmaCore.DA_MAX_QP_RD_ATOM)));
            initiatorDepth = Math.max(1, Math.min(queuePairs.readDepth(),
                    attr.get(JAVA_INT, RdmaCore.DA_MAX_QP_INIT_RD_ATOM)));
            InetSocketAddress local = cm.listener().listen(bind);
            address = local.getAddress();
            port = local.getPort();
            pd = (MemorySegment) core.allocPd.invokeExact(state(), RdmaCore.at(context));
            if (pd.equals(MemorySegment.NULL)) {
                throw new TransportException("verbs: ibv_alloc_pd on " + name + " failed: " + core.lastError());
            }
            release.push(() -> call(() -> {
                int r = (int) core.deallocPd.invokeExact(pd);
                if (r != 0) {
                    LOG.warn("verbs: ibv_dealloc_pd failed: {} (a region is still registered)", core.describe(r));
                }
            }));
            MemorySegment compChannel = (MemorySegment) core.createCompChannel.invokeExact(state(),
                    RdmaCore.at(context));
            if (compChannel.equals(MemorySegment.NULL)) {
                throw new TransportException("verbs: ibv_create_comp_channel failed: " + core.lastError());
            }
            release.push(() -> call(() -> {
                int r = (int) core.destroyCompChannel.invokeExact(compChannel);
            }));
            int compFd = getInt(compChannel.address() + RdmaCore.COMP_CHANNEL_FD);
            nonBlocking(compFd);
            cq = (MemorySegment) core.createCq.invokeExact(state(), RdmaCore.at(context), completionQueueSize,
                    MemorySegment.NULL, compChannel, 0);
            if (cq.equals(MemorySegment.NULL)) {
                throw new TransportException("verbs: ibv_create_cq with " + completionQueueSize + " entries failed: "
                        + core.lastError());
            }
            release.push(() -> call(() -> {
                int r = (int) core.destroyCq.invokeExact(cq);
                if (r != 0) {
                    LOG.warn("verbs: ibv_destroy_cq failed: {}", core.describe(r));
                }
            }));
            MemorySegment pollCqFn = RdmaCore.at(getLong(context + RdmaCore.CTX_OPS_POLL_CQ));
            MemorySegment reqNotifyFn = RdmaCore.at(getLong(context + RdmaCore.CTX_OPS_REQ_NOTIFY_CQ));
            postSendFn = RdmaCore.at(getLong(context + RdmaCore.CTX_OPS_POST_SEND));
            if (pollCqFn.address() == 0 || reqNotifyFn.address() == 0 || postSendFn.address() == 0) {
                throw new TransportException("verbs: " + name + "'s provider library leaves poll_cq, req_notify_cq or "
                        + "post_send unset in its ops table");
            }
            connParam = arena.allocate(RdmaCore.CP_SIZE, 8);
            connParam.set(JAVA_BYTE, RdmaCore.CP_RESPONDER_RESOURCES, (byte) responderResources);
            connParam.set(JAVA_BYTE, RdmaCore.CP_INITIATOR_DEPTH, (byte) initiatorDepth);
            connParam.set(JAVA_BYTE, RdmaCore.CP_RETRY_COUNT, (byte) queuePairs.retryCount());
            connParam.set(JAVA_BYTE, RdmaCore.CP_RNR_RETRY_COUNT, (byte) queuePairs.rnrRetryCount());
            completions = new FfmCompletions(this, arena, this.queuePairs, ports, cq, compChannel, compFd, pollCqFn,
                    reqNotifyFn, eventTimeoutMs);
        } catch (IOException | RuntimeException | Error e) {
            releaseAll();
            throw e;
        } catch (Throwable t) {
            releaseAll();
            throw new TransportException("verbs: cannot start: " + t, t);
        }
        cm.start(ports);
        completions.start();
        LOG.debug("verbs through java.lang.foreign on {}: responder_resources {}, initiator_depth {}", name,
                responderResources, initiatorDepth);
    }

    /**
     * A native call that may throw only what the callee cannot: wrapped. Write each invokeExact as a
     * statement in a block (an int result assigned): as an expression lambda its call site would return
     * Object, and invokeExact would throw WrongMethodTypeException.
     */
    interface NativeCall {
        void run() throws Throwable;
    }

    static void call(NativeCall c) {
        try {
            c.run();
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }

    static void check(RdmaCore core, int rc, String what) throws TransportException {
        if (rc != 0) {
            throw new TransportException("verbs: " + what + " failed: " + core.lastError());
        }
    }

    private void nonBlocking(int fd) throws Throwable {
        int flags = (int) core.fcntl.invokeExact(fd, RdmaCore.F_GETFL, 0);
        if (flags < 0 || (int) core.fcntl.invokeExact(fd, RdmaCore.F_SETFL, flags | RdmaCore.O_NONBLOCK) < 0) {
            throw new TransportException("verbs: cannot make file descriptor " + fd + " non-blocking");
        }
    }

    private String deviceName(long ctx) {
        try {
            MemorySegment n = (MemorySegment) core.deviceName.invokeExact(RdmaCore.at(getLong(ctx)));
            return n.equals(MemorySegment.NULL) ? "an RDMA device" : n.reinterpret(64).getString(0);
        } catch (Throwable t) {
            return "an RDMA device";
        }
    }

    private void releaseAll() {
        while (!release.isEmpty()) {
            try {
                release.pop().run();
            } catch (RuntimeException e) {
                LOG.debug("verbs: releasing a device resource failed", e);
            }
        }
        arena.close();
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    public String api() {
        return "java.lang.foreign";
    }

    @Override
    public InetAddress address() {
        return address;
    }

    @Override
    public int port() {
        return port;
    }

    @Override
    public String depths() {
        return "initiator_depth=" + initiatorDepth + ", responder_resources=" + responderResources
                + " (verbs.maxQpReadAtoms within the device's max_qp_init_rd_atom and max_qp_rd_atom)";
    }

    MemorySegment pd() {
        return pd;
    }

    int responderResources() {
        return responderResources;
    }

    int initiatorDepth() {
        return initiatorDepth;
    }

    boolean closed() {
        return closed;
    }

    @Override
    public Memory register(Domain domain, ByteBuffer memory, int access) throws IOException {
        MemorySegment in = domain == null ? pd : ((FfmDomain) domain).pd;
        return FfmMemory.register(core, in, lifecycle.readLock(), this::closed, memory, access);
    }

    /**
     * ibv_alloc_pd on the listener's device context, as the default protection domain was. Called on the cm
     * thread too (a queue pair admitted for a realm with no domain yet), which holds the cm lock that
     * {@link #close} waits for while it holds the write lock: so the read lock is only tried, never waited for.
     */
    @Override
    public Domain openDomain() throws IOException {
        if (!lifecycle.readLock().tryLock()) {
            throw new TransportException("verbs: the device is closing");
        }
        try {
            if (closed) {
                throw new TransportException("verbs: the device is closed");
            }
            MemorySegment p = (MemorySegment) core.allocPd.invokeExact(state(), RdmaCore.at(context));
            if (p.equals(MemorySegment.NULL)) {
                throw new TransportException("verbs: ibv_alloc_pd on " + name + " failed: " + core.lastError());
            }
            FfmDomain d = new FfmDomain(p);
            domains.add(d);
            return d;
        } catch (IOException | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new TransportException("verbs: ibv_alloc_pd: " + t, t);
        } finally {
            lifecycle.readLock().unlock();
        }
    }

    /**
     * A realm's protection domain: ibv_dealloc_pd once, when the node let go of it (its regions deregistered and
     * its queue pairs destroyed), or when the device closes with it still allocated.
     */
    final class FfmDomain implements Domain {
        final MemorySegment pd;
        private boolean deallocated;

        FfmDomain(MemorySegment pd) {
            this.pd = pd;
        }

        @Override
        public synchronized void deallocate() throws IOException {
            if (deallocated) {
                return;
            }
            int r;
            try {
                r = (int) core.deallocPd.invokeExact(pd);
            } catch (Throwable t) {
                throw new IOException("ibv_dealloc_pd: " + t, t);
            }
            if (r != 0) { // a region or queue pair is still in it: kept
                throw new IOException("ibv_dealloc_pd failed: " + core.describe(r));
            }
            deallocated = true;
            domains.remove(this);
        }
    }

    @Override
    public boolean carriesProof() {
        return true;
    }

    @Override
    public QueuePair connect(InetSocketAddress target, long timeoutMs, byte[] privateData) throws IOException {
        return cm.connect(new InetSocketAddress(address, 0), target, timeoutMs, privateData, lifecycle.readLock());
    }

    /** A client queue pair now has a qp_num: its completions reach it from now on. */
    void completionsFor(int qpNum, FfmQueuePair qp) {
        queuePairs.completionsFor(qpNum, qp);
    }

    /** See {@link FfmConnectionManager#destroyId}. */
    boolean destroyId(long id, boolean disconnect, boolean destroyQp) {
        return cm.destroyId(id, disconnect, destroyQp);
    }

    /** Forgets a destroyed queue pair. */
    void forget(FfmQueuePair qp, long id, int qpNum) {
        queuePairs.forget(qp, id, qpNum);
    }

    /** An accepted queue pair went away: closed off the connection-manager thread. */
    void acceptedGone(FfmQueuePair qp) {
        cm.listener().acceptedGone(qp);
    }

    /** On the cm thread: an accepted queue pair is connected (unless it went away before). */
    void acceptedEstablished(FfmQueuePair qp) {
        cm.listener().acceptedEstablished(qp);
    }

    @Override
    public void afterCompletionsPolled(Runnable r) {
        completions.afterCompletionsPolled(r);
    }

    @Override
    public void checkPorts() {
        ports.check();
    }

    @Override
    public void closeListener() {
        cm.listener().destroy();
        for (FfmQueuePair qp : queuePairs.takeAccepted()) {
            qp.closeQuietly();
        }
    }

    @Override
    public void close() {
        lifecycle.writeLock().lock();
        try {
            if (closed) {
                return;
            }
            closeListener();
            closed = true;
        } finally {
            lifecycle.writeLock().unlock();
        }
        boolean stopped = join(cm.thread()) & join(completions.thread());
        for (FfmQueuePair qp : queuePairs.all()) {
            qp.closeQuietly();
        }
        if (!stopped) {
            // A thread still inside a native call would use what is freed: leave it all (a leak, logged).
            cm.released();
            LOG.warn("verbs: a device thread did not stop; its completion queue, protection domain and event "
                    + "channel are left allocated");
            return;
        }
        for (FfmDomain d : domains.toArray(new FfmDomain[0])) { // before the default one and the listener's id
            try {
                d.deallocate();
            } catch (IOException e) {
                LOG.warn("verbs: a realm's protection domain is left allocated: {}", e.getMessage());
            }
        }
        releaseAll();
    }

    private boolean join(Thread t) {
        try {
            t.join(Math.max(5_000, 4L * eventTimeoutMs));
            if (t.isAlive()) {
                LOG.warn("{} did not stop", t.getName());
                return false;
            }
            return true;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }
}
