package org.rdmashuffle.transport.verbs;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static java.lang.foreign.ValueLayout.JAVA_SHORT;
import static org.rdmashuffle.transport.verbs.RdmaCore.getInt;
import static org.rdmashuffle.transport.verbs.RdmaCore.getLong;
import static org.rdmashuffle.transport.verbs.RdmaCore.state;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.Inet4Address;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Deque;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The verbs device reached through {@code java.lang.foreign} ({@link RdmaCore}): an rdma_cm event
 * channel with its own thread, a listener bound to the node's address, the protection domain and one
 * completion queue (with a completion channel) on the listener's device, and a completion thread that
 * polls that queue into a work-completion array allocated once and hands each completion straight to
 * its channel, with no thread hand-off, no boxing and no allocation.
 */
final class FfmDevice implements VerbsDevice {
    private static final Logger LOG = LoggerFactory.getLogger(FfmDevice.class);
    /** errno EADDRINUSE (Linux). */
    private static final int EADDRINUSE = 98;
    /**
     * Accepted queue pairs that may wait for their connection at once; further connect requests are
     * refused, so that a flood of requests that never complete cannot take every queue pair of the device.
     */
    private static final int MAX_PENDING_ACCEPTS = 256;
    /** Ports an rdma_cm listener tries when the ones it picked are TCP ports in use (iWARP). */
    private static final int LISTEN_ATTEMPTS = 8;
    /** Work completions taken per ibv_poll_cq call. */
    private static final int WC_BATCH = 32;
    /** Completion events acknowledged together (ibv_ack_cq_events takes a mutex). */
    private static final int ACK_BATCH = 32;

    final RdmaCore core;
    final VerbsNode node;
    private final Arena arena = Arena.ofShared();
    private final Deque<Runnable> release = new ArrayDeque<>();
    private final int eventTimeoutMs;
    final int credits;
    private final QueuePairParameters queuePairs;
    private final MemorySegment eventChannel;
    private final int eventFd;
    private final Object listenerLock = new Object();
    /**
     * Held by the cm thread while it takes, acknowledges and handles an event, and while any id is
     * destroyed: librdmacm changes a queue pair's state inside rdma_get_cm_event, so an id must not be
     * destroyed meanwhile, and no event of a destroyed id can then reach a new id at the same address.
     */
    private final java.util.concurrent.locks.ReentrantLock cmLock = new java.util.concurrent.locks.ReentrantLock();
    /** Read side: a connect or registration in progress; write side: close, which frees what they use. */
    private final java.util.concurrent.locks.ReentrantReadWriteLock lifecycle =
            new java.util.concurrent.locks.ReentrantReadWriteLock();
    /**
     * Callbacks waiting for the completion queue to be polled past what it holds now
     * ({@link #afterCompletionsPolled}); the completion thread's, but for adding.
     */
    private final java.util.concurrent.ConcurrentLinkedQueue<Runnable> barriers =
            new java.util.concurrent.ConcurrentLinkedQueue<>();
    private long listenId;
    final long context;
    private final MemorySegment pd;
    private final MemorySegment compChannel;
    private final int compFd;
    final MemorySegment cq;
    private final MemorySegment pollCqFn;
    private final MemorySegment reqNotifyFn;
    final MemorySegment postSendFn;
    /** rdma_conn_param every connect and accept uses. */
    final MemorySegment connParam;
    private final String name;
    private final InetAddress address;
    private final int port;
    private final int responderResources;
    private final int initiatorDepth;
    /** Queue pairs by rdma_cm id address (control path only). */
    private final Map<Long, FfmQueuePair> byId = new ConcurrentHashMap<>();
    /** Client queue pairs by qp_num, read by the completion thread without locking or boxing. */
    private final QpTable byQpNum = new QpTable();
    private final Set<FfmQueuePair> accepted = ConcurrentHashMap.newKeySet();
    /** Connect requests refused for too many pending accepts (the cm thread's). */
    private long refusedFloods;
    private final Thread cmThread;
    private final Thread cqThread;
    private volatile boolean closed;
    private volatile boolean accepting = true;

    FfmDevice(VerbsNode node, RdmaCore core, InetSocketAddress bind, QueuePairParameters queuePairs, int credits,
              int completionQueueSize, int eventTimeoutMs) throws IOException {
        this.node = node;
        this.core = core;
        this.credits = credits;
        this.queuePairs = queuePairs;
        this.eventTimeoutMs = eventTimeoutMs;
        try {
            eventChannel = (MemorySegment) core.createEventChannel.invokeExact(state());
            if (eventChannel.equals(MemorySegment.NULL)) {
                throw new TransportException("verbs: rdma_create_event_channel failed: " + core.lastError()
                        + " (is rdma_ucm loaded? /dev/infiniband/rdma_cm must exist)");
            }
            release.push(() -> call(() -> {
                core.destroyEventChannel.invokeExact(eventChannel);
            }));
            eventFd = getInt(eventChannel.address() + RdmaCore.EVENT_CHANNEL_FD);
            nonBlocking(eventFd);
            MemorySegment idOut = arena.allocate(ADDRESS);
            check((int) core.createId.invokeExact(state(), eventChannel, idOut, MemorySegment.NULL,
                    RdmaCore.RDMA_PS_TCP), "rdma_create_id");
            listenId = idOut.get(ADDRESS, 0).address();
            release.push(this::destroyListener);
            try (Arena a = Arena.ofConfined()) {
                if ((int) core.bindAddr.invokeExact(state(), RdmaCore.at(listenId), sockaddr(a, bind)) != 0) {
                    throw new TransportException("verbs: cannot listen with rdma_cm on " + bind.getHostString() + ": "
                            + core.lastError() + " (is the address on an RDMA device? see `rdma link show`)");
                }
            }
            context = getLong(listenId + RdmaCore.ID_VERBS);
            if (context == 0) {
                throw new TransportException("verbs: no RDMA device serves " + bind.getHostString()
                        + " (rdma_cm bound no device; bind to the address of an RDMA-capable interface)");
            }
            name = deviceName(context);
            MemorySegment attr = arena.allocate(RdmaCore.DA_SIZE, 8);
            int rc = (int) core.queryDevice.invokeExact(RdmaCore.at(context), attr);
            if (rc != 0) {
                throw new TransportException("verbs: ibv_query_device on " + name + " failed: " + core.describe(rc));
            }
            int maxQpWr = attr.get(JAVA_INT, RdmaCore.DA_MAX_QP_WR);
            int maxCqe = attr.get(JAVA_INT, RdmaCore.DA_MAX_CQE);
            int maxRdAtom = attr.get(JAVA_INT, RdmaCore.DA_MAX_QP_RD_ATOM);
            int maxInitRdAtom = attr.get(JAVA_INT, RdmaCore.DA_MAX_QP_INIT_RD_ATOM);
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
            responderResources = Math.max(1, Math.min(queuePairs.readDepth(), maxRdAtom));
            initiatorDepth = Math.max(1, Math.min(queuePairs.readDepth(), maxInitRdAtom));
            for (int attempt = 1; (int) core.listen.invokeExact(state(), RdmaCore.at(listenId), 256) != 0; attempt++) {
                int errno = RdmaCore.lastErrno();
                if (errno != EADDRINUSE || bind.getPort() != 0 || attempt == LISTEN_ATTEMPTS) {
                    throw new TransportException("verbs: rdma_listen on " + bind.getHostString() + " failed: "
                            + core.describe(errno) + (errno == EADDRINUSE && bind.getPort() == 0 ? " on " + attempt
                            + " ports rdma_cm chose (on iWARP each is also a TCP port of the host)" : ""));
                }
                // iWARP listens on a TCP port of the host, while rdma_cm picks ports from its own space: the
                // one it chose can belong to a TCP socket. Another id gets another port.
                LOG.debug("verbs: rdma_cm port on {} is in use as a TCP port; listening on another", bind);
                long taken = listenId;
                check((int) core.createId.invokeExact(state(), eventChannel, idOut, MemorySegment.NULL,
                        RdmaCore.RDMA_PS_TCP), "rdma_create_id");
                listenId = idOut.get(ADDRESS, 0).address();
                call(() -> {
                    int r = (int) core.destroyId.invokeExact(RdmaCore.at(taken));
                });
                try (Arena a = Arena.ofConfined()) {
                    if ((int) core.bindAddr.invokeExact(state(), RdmaCore.at(listenId), sockaddr(a, bind)) != 0) {
                        throw new TransportException("verbs: cannot listen with rdma_cm on " + bind.getHostString()
                                + ": " + core.lastError());
                    }
                }
            }
            InetSocketAddress local = readSockaddr(listenId + RdmaCore.ID_SRC_ADDR);
            if (local == null || local.getPort() <= 0) {
                throw new TransportException("verbs: rdma_cm listener reports no port");
            }
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
            compChannel = (MemorySegment) core.createCompChannel.invokeExact(state(), RdmaCore.at(context));
            if (compChannel.equals(MemorySegment.NULL)) {
                throw new TransportException("verbs: ibv_create_comp_channel failed: " + core.lastError());
            }
            release.push(() -> call(() -> {
                int r = (int) core.destroyCompChannel.invokeExact(compChannel);
            }));
            compFd = getInt(compChannel.address() + RdmaCore.COMP_CHANNEL_FD);
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
            pollCqFn = RdmaCore.at(getLong(context + RdmaCore.CTX_OPS_POLL_CQ));
            reqNotifyFn = RdmaCore.at(getLong(context + RdmaCore.CTX_OPS_REQ_NOTIFY_CQ));
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
        } catch (IOException | RuntimeException | Error e) {
            releaseAll();
            throw e;
        } catch (Throwable t) {
            releaseAll();
            throw new TransportException("verbs: cannot start: " + t, t);
        }
        cmThread = new Thread(this::cmLoop, "rdma-verbs-cm-" + port);
        cmThread.setDaemon(true);
        cqThread = new Thread(this::cqLoop, "rdma-verbs-cq-" + port);
        cqThread.setDaemon(true);
        cmThread.start();
        cqThread.start();
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

    private void check(int rc, String what) throws TransportException {
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

    private void destroyListener() {
        cmLock.lock(); // before listenerLock, as the cm thread takes them
        try {
            synchronized (listenerLock) {
                accepting = false;
                if (listenId != 0) {
                    long id = listenId;
                    listenId = 0;
                    call(() -> {
                        int r = (int) core.destroyId.invokeExact(RdmaCore.at(id));
                    });
                }
            }
        } finally {
            cmLock.unlock();
        }
    }

    /** A sockaddr_in or sockaddr_in6 for {@code a}, in {@code arena}. */
    static MemorySegment sockaddr(Arena arena, InetSocketAddress a) throws UnknownHostException {
        InetAddress ip = a.getAddress();
        if (ip == null) {
            throw new UnknownHostException(a.getHostString());
        }
        int port = a.getPort();
        MemorySegment s;
        if (ip instanceof Inet4Address) {
            s = arena.allocate(16, 8);
            s.set(JAVA_SHORT, 0, (short) 2); // AF_INET
            s.asSlice(4, 4).copyFrom(MemorySegment.ofArray(ip.getAddress()));
        } else {
            s = arena.allocate(28, 8);
            s.set(JAVA_SHORT, 0, (short) 10); // AF_INET6
            s.asSlice(8, 16).copyFrom(MemorySegment.ofArray(ip.getAddress()));
            s.set(JAVA_INT, 24, ((Inet6Address) ip).getScopeId());
        }
        s.set(JAVA_BYTE, 2, (byte) (port >>> 8)); // network byte order
        s.set(JAVA_BYTE, 3, (byte) port);
        return s;
    }

    /** The socket address at {@code addr} (a sockaddr_in or sockaddr_in6), or null for another family. */
    static InetSocketAddress readSockaddr(long addr) {
        MemorySegment m = RdmaCore.MEM;
        int family = m.get(java.lang.foreign.ValueLayout.JAVA_SHORT_UNALIGNED, addr) & 0xFFFF;
        int port = ((m.get(JAVA_BYTE, addr + 2) & 0xFF) << 8) | (m.get(JAVA_BYTE, addr + 3) & 0xFF);
        byte[] ip;
        if (family == 2) {
            ip = new byte[4];
            MemorySegment.copy(m, JAVA_BYTE, addr + 4, ip, 0, 4);
        } else if (family == 10) {
            ip = new byte[16];
            MemorySegment.copy(m, JAVA_BYTE, addr + 8, ip, 0, 16);
        } else {
            return null;
        }
        try {
            return new InetSocketAddress(InetAddress.getByAddress(ip), port);
        } catch (UnknownHostException e) {
            return null;
        }
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

    // ---- memory ----

    @Override
    public Memory register(ByteBuffer memory, int access) throws IOException {
        MemorySegment buf = MemorySegment.ofBuffer(memory.duplicate().clear());
        MemorySegment mr;
        lifecycle.readLock().lock();
        try {
            if (closed) {
                throw new TransportException("verbs: the device is closed");
            }
            mr = (MemorySegment) core.regMr.invokeExact(state(), pd, buf, (long) memory.capacity(), access);
        } catch (IOException | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new TransportException("verbs: registering " + memory.capacity() + " bytes failed: " + t, t);
        } finally {
            lifecycle.readLock().unlock();
        }
        if (mr.equals(MemorySegment.NULL)) {
            throw new TransportException("verbs: registering " + memory.capacity() + " bytes failed: "
                    + core.lastError() + " (check the locked-memory limit, `ulimit -l`, and the device's max_mr_size)");
        }
        long m = mr.address();
        long addr = getLong(m + RdmaCore.MR_ADDR);
        int lkey = getInt(m + RdmaCore.MR_LKEY);
        int rkey = getInt(m + RdmaCore.MR_RKEY);
        return new Memory() {
            private boolean done;

            @Override
            public long address() {
                return addr;
            }

            @Override
            public int lkey() {
                return lkey;
            }

            @Override
            public int rkey() {
                return rkey;
            }

            @Override
            public synchronized void deregister() throws Exception {
                if (done) {
                    return;
                }
                int rc;
                try {
                    rc = (int) core.deregMr.invokeExact(mr);
                } catch (Throwable t) {
                    throw new IOException("ibv_dereg_mr: " + t, t);
                }
                if (rc != 0) { // still registered: the caller keeps the memory (VerbsRegion)
                    throw new IOException("ibv_dereg_mr failed: " + core.describe(rc));
                }
                done = true; // only now: a failed deregistration is not a done one
            }
        };
    }

    // ---- connections ----

    @Override
    public boolean carriesProof() {
        return true;
    }

    @Override
    public QueuePair connect(InetSocketAddress target, long timeoutMs, byte[] privateData) throws IOException {
        FfmQueuePair qp = new FfmQueuePair(this, false, null);
        qp.privateData(privateData);
        IOException failed = null;
        lifecycle.readLock().lock();
        try (Arena a = Arena.ofConfined()) {
            if (closed) {
                throw new IOException("rdma_cm connect to " + target + " failed: the node is closing");
            }
            MemorySegment idOut = a.allocate(ADDRESS);
            int rc = (int) core.createId.invokeExact(state(), eventChannel, idOut, MemorySegment.NULL,
                    RdmaCore.RDMA_PS_TCP);
            if (rc != 0) {
                throw new IOException("rdma_cm connect to " + target + " failed: rdma_create_id: " + core.lastError());
            }
            long id = idOut.get(ADDRESS, 0).address();
            qp.start(id);
            byId.put(id, qp);
            qp.resolve(sockaddr(a, new InetSocketAddress(address, 0)), sockaddr(a, target),
                    (int) Math.min(Integer.MAX_VALUE, timeoutMs));
        } catch (IOException e) {
            failed = e.getMessage() != null && e.getMessage().startsWith("rdma_cm") ? e
                    : new IOException("rdma_cm connect to " + target + " failed: " + e.getMessage(), e);
        } catch (Throwable t) {
            failed = new IOException("rdma_cm connect to " + target + " failed: " + t, t);
        } finally {
            lifecycle.readLock().unlock();
        }
        if (failed != null) {
            qp.closeQuietly();
            throw failed;
        }
        qp.awaitConnected(target, timeoutMs);
        return qp;
    }

    /** A client queue pair now has a qp_num: its completions reach it from now on. */
    void completionsFor(int qpNum, FfmQueuePair qp) {
        byQpNum.put(qpNum, qp);
    }

    /**
     * Destroys an id (disconnecting and destroying its queue pair first), under the cm lock.
     *
     * @return whether it was destroyed (false: a native call failed, or close() left native resources alone)
     */
    boolean destroyId(long id, boolean disconnect, boolean destroyQp) {
        cmLock.lock();
        try {
            if (released) {
                return false; // close() gave up on a thread that did not stop: everything native is left alone
            }
            call(() -> {
                if (disconnect) {
                    int r = (int) core.disconnect.invokeExact(RdmaCore.at(id));
                }
                if (destroyQp) {
                    core.destroyQp.invokeExact(RdmaCore.at(id));
                }
                int r = (int) core.destroyId.invokeExact(RdmaCore.at(id));
            });
            return true;
        } catch (RuntimeException e) {
            LOG.warn("verbs: destroying an rdma_cm id failed; the buffers of its READs are kept", e);
            return false;
        } finally {
            cmLock.unlock();
        }
    }

    /** Forgets a destroyed queue pair. */
    void forget(FfmQueuePair qp, long id, int qpNum) {
        if (id != 0) {
            byId.remove(id, qp);
        }
        if (qpNum >= 0 && !qp.serverSide()) {
            byQpNum.remove(qpNum, qp);
        }
        accepted.remove(qp);
    }

    /** Accepted queue pairs whose connection is not established yet (each is aborted after connectTimeout). */
    private int pendingAccepts() {
        int n = 0;
        for (FfmQueuePair qp : byId.values()) {
            if (qp.serverSide() && !accepted.contains(qp)) {
                n++;
            }
        }
        return n;
    }

    /** An accepted queue pair went away: closed off the connection-manager thread. */
    void acceptedGone(FfmQueuePair qp) {
        if (accepted.remove(qp) || !closed) {
            node.execute(qp::closeQuietly);
        }
    }

    /** On the cm thread: an accepted queue pair is connected (unless it went away before). */
    void acceptedEstablished(FfmQueuePair qp) {
        AcceptedQueuePairs.Entry e = qp.entry();
        if (e != null && !e.connected(() -> node.execute(qp::closeQuietly), System.nanoTime())) {
            node.execute(qp::closeQuietly);
            return;
        }
        accepted.add(qp);
        node.acceptedQueuePair();
    }

    private void cmLoop() {
        MemorySegment evOut = arena.allocate(ADDRESS);
        MemorySegment pfd = arena.allocate(8, 8);
        while (!closed) {
            pfd.set(JAVA_INT, 0, eventFd);
            pfd.set(JAVA_SHORT, 4, RdmaCore.POLLIN);
            pfd.set(JAVA_SHORT, 6, (short) 0);
            try {
                int r = (int) core.poll.invokeExact(state(), pfd, 1L, eventTimeoutMs);
                if (r < 0) {
                    if (RdmaCore.lastErrno() != RdmaCore.EINTR) {
                        LOG.warn("verbs: poll on the rdma_cm event channel failed: {}", core.lastError());
                        Thread.sleep(eventTimeoutMs);
                    }
                    continue;
                }
                if (r == 0) {
                    continue;
                }
                while (!closed && nextCmEvent(evOut)) {
                    // another event may be waiting
                }
            } catch (InterruptedException e) {
                if (closed) {
                    break;
                }
            } catch (Throwable t) {
                if (closed) {
                    break;
                }
                LOG.warn("verbs: handling an rdma_cm event failed", t);
            }
        }
    }

    /** Takes, acknowledges and handles one rdma_cm event under the cm lock; false when none was waiting. */
    private boolean nextCmEvent(MemorySegment evOut) throws Throwable {
        cmLock.lock();
        try {
            if ((int) core.getCmEvent.invokeExact(state(), eventChannel, evOut) != 0) {
                int errno = RdmaCore.lastErrno();
                if (errno != RdmaCore.EAGAIN && errno != RdmaCore.EINTR && !closed) {
                    LOG.warn("verbs: rdma_get_cm_event failed: {}", core.describe(errno));
                }
                return false;
            }
            long ev = evOut.get(ADDRESS, 0).address();
            long id = getLong(ev + RdmaCore.EV_ID);
            int type = getInt(ev + RdmaCore.EV_EVENT);
            int status = getInt(ev + RdmaCore.EV_STATUS);
            byte[] privateData = type == RdmaCore.EV_CONNECT_REQUEST ? privateData(ev) : null; // gone once acked
            int ignored = (int) core.ackCmEvent.invokeExact(RdmaCore.at(ev));
            if (type == RdmaCore.EV_CONNECT_REQUEST) {
                onConnectRequest(id, privateData);
            } else {
                onCmEvent(id, type, status);
            }
            return true;
        } finally {
            cmLock.unlock();
        }
    }

    /** What a connect request event carries in param.conn (at most a proof's worth; null when none). */
    private static byte[] privateData(long ev) {
        long p = getLong(ev + RdmaCore.EV_PRIVATE_DATA);
        int len = RdmaCore.MEM.get(JAVA_BYTE, ev + RdmaCore.EV_PRIVATE_DATA_LEN) & 0xFF;
        if (p == 0 || len == 0) {
            return null;
        }
        byte[] d = new byte[Math.min(len, QueuePairAdmissions.PROOF_BYTES)];
        MemorySegment.copy(RdmaCore.MEM, JAVA_BYTE, p, d, 0, d.length);
        return d;
    }

    private void onCmEvent(long id, int type, int status) {
        FfmQueuePair qp = byId.get(id);
        if (qp != null) {
            qp.onCmEvent(type, status);
        }
    }

    /**
     * A peer asks to connect: admitted queue pairs ({@link VerbsNode#admitQueuePair}: the caps, and with
     * authentication on the proof its request carries) are created and accepted; others are rejected
     * before any queue pair exists.
     */
    private void onConnectRequest(long id, byte[] privateData) {
        InetSocketAddress from = readSockaddr(id + RdmaCore.ID_DST_ADDR);
        AcceptedQueuePairs.Entry entry = null;
        synchronized (listenerLock) {
            boolean flooded = pendingAccepts() >= MAX_PENDING_ACCEPTS;
            if (flooded && refusedFloods++ % 1000 == 0) {
                LOG.warn("verbs: {} queue pairs accepted on {} have not connected yet; refusing connect requests "
                        + "(from {}, {} so far) until they connect or time out", MAX_PENDING_ACCEPTS, name, from,
                        refusedFloods);
            }
            if (!flooded && accepting) {
                entry = node.admitQueuePair(from, privateData);
            }
            if (entry == null) {
                call(() -> {
                    int r = (int) core.reject.invokeExact(RdmaCore.at(id), MemorySegment.NULL, (byte) 0);
                    r = (int) core.destroyId.invokeExact(RdmaCore.at(id));
                });
                return;
            }
        }
        FfmQueuePair qp = new FfmQueuePair(this, true, entry);
        qp.start(id);
        byId.put(id, qp);
        try {
            qp.accept();
        } catch (IOException e) {
            node.noteAbortedAccept(e.getMessage());
            qp.closeQuietly();
            return;
        }
        long timeoutMs = node.connectTimeoutMs();
        try {
            node.schedule(() -> qp.abortAccept("no connection within " + timeoutMs + " ms"), timeoutMs);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            qp.closeQuietly(); // the node is closing
        }
    }

    private void cqLoop() {
        MemorySegment wcs = arena.allocate(RdmaCore.WC_SIZE * WC_BATCH, 8);
        MemorySegment pfd = arena.allocate(8, 8);
        MemorySegment cqOut = arena.allocate(ADDRESS);
        MemorySegment ctxOut = arena.allocate(ADDRESS);
        int unacked = 0;
        java.util.ArrayList<Runnable> due = new java.util.ArrayList<>();
        try {
            while (!closed) {
                if (!barriers.isEmpty()) { // failures only: the READ path finds the queue empty
                    for (Runnable r; (r = barriers.poll()) != null;) {
                        due.add(r);
                    }
                }
                int n = (int) core.pollCq.invokeExact(pollCqFn, cq, WC_BATCH, wcs);
                if (n < 0) {
                    node.deviceFailed("ibv_poll_cq failed (" + n + ")");
                    return;
                }
                if (n > 0) {
                    dispatch(wcs, n);
                }
                if (n < WC_BATCH && !due.isEmpty()) {
                    runBarriers(due); // polled past everything queued before they were added
                }
                if (n == WC_BATCH) {
                    continue;
                }
                if (closed) {
                    break;
                }
                int rc = (int) core.reqNotifyCq.invokeExact(reqNotifyFn, cq, 0);
                if (rc != 0) {
                    node.deviceFailed("ibv_req_notify_cq failed: " + core.describe(rc));
                    return;
                }
                n = (int) core.pollCq.invokeExact(pollCqFn, cq, WC_BATCH, wcs); // those that came before arming
                if (n > 0) {
                    dispatch(wcs, n);
                    continue;
                }
                pfd.set(JAVA_INT, 0, compFd);
                pfd.set(JAVA_SHORT, 4, RdmaCore.POLLIN);
                pfd.set(JAVA_SHORT, 6, (short) 0);
                int r = (int) core.poll.invokeExact(state(), pfd, 1L, eventTimeoutMs);
                if (r > 0 && (int) core.getCqEvent.invokeExact(state(), compChannel, cqOut, ctxOut) == 0) {
                    if (++unacked >= ACK_BATCH) {
                        core.ackCqEvents.invokeExact(cq, unacked);
                        unacked = 0;
                    }
                }
            }
        } catch (Throwable t) {
            LOG.error("verbs: the completion thread failed", t);
            node.deviceFailed("the completion thread failed: " + t);
        } finally {
            for (Runnable r; (r = barriers.poll()) != null;) {
                due.add(r);
            }
            runBarriers(due); // nothing polls any more
            if (unacked > 0) {
                int u = unacked;
                call(() -> {
                    core.ackCqEvents.invokeExact(cq, u);
                });
            }
        }
    }

    private static void runBarriers(java.util.ArrayList<Runnable> due) {
        for (Runnable r : due) {
            try {
                r.run();
            } catch (RuntimeException e) {
                LOG.error("verbs: a completion-queue barrier failed", e);
            }
        }
        due.clear();
    }

    @Override
    public void afterCompletionsPolled(Runnable r) {
        if (closed) {
            r.run(); // no thread polls any more
            return;
        }
        barriers.add(r);
        if (closed && barriers.remove(r)) {
            r.run();
        }
    }

    private void dispatch(MemorySegment wcs, int n) {
        for (int i = 0; i < n; i++) {
            long base = i * RdmaCore.WC_SIZE;
            long wrId = wcs.get(JAVA_LONG, base + RdmaCore.WC_WR_ID);
            int status = wcs.get(JAVA_INT, base + RdmaCore.WC_STATUS);
            int qpNum = wcs.get(JAVA_INT, base + RdmaCore.WC_QP_NUM);
            FfmQueuePair qp = byQpNum.get(qpNum);
            // A destroyed queue pair's completion may still be queued when its number is reused: the channel
            // tells them apart by the queue pair's tag in the id (WorkRequestIds).
            VerbsChannel c = qp == null ? null : qp.channel();
            if (c != null) {
                try {
                    c.onCompletion(qp, wrId, status);
                } catch (RuntimeException e) {
                    LOG.error("verbs: handling a completion failed", e);
                }
            }
        }
    }

    @Override
    public void closeListener() {
        destroyListener();
        for (FfmQueuePair qp : accepted.toArray(new FfmQueuePair[0])) {
            qp.closeQuietly();
        }
        accepted.clear();
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
        boolean stopped = join(cmThread) & join(cqThread);
        for (FfmQueuePair qp : byId.values().toArray(new FfmQueuePair[0])) {
            qp.closeQuietly();
        }
        if (!stopped) {
            // A thread still inside a native call would use what is freed: leave it all (a leak, logged).
            cmLock.lock();
            try {
                released = true;
            } finally {
                cmLock.unlock();
            }
            LOG.warn("verbs: a device thread did not stop; its completion queue, protection domain and event "
                    + "channel are left allocated");
            return;
        }
        releaseAll();
    }

    /** Whether close() left native resources alone (a thread did not stop); guarded by cmLock. */
    private boolean released;

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

    /** int qp_num to queue pair, copy on write: the completion thread reads it with no lock and no boxing. */
    static final class QpTable {
        private record Snapshot(int[] keys, FfmQueuePair[] values) {
        }

        private volatile Snapshot snapshot = new Snapshot(new int[0], new FfmQueuePair[0]);

        FfmQueuePair get(int key) {
            Snapshot s = snapshot;
            int i = Arrays.binarySearch(s.keys, key);
            return i >= 0 ? s.values[i] : null;
        }

        synchronized void put(int key, FfmQueuePair v) {
            Snapshot s = snapshot;
            int i = Arrays.binarySearch(s.keys, key);
            if (i >= 0) {
                FfmQueuePair[] vs = s.values.clone();
                vs[i] = v;
                snapshot = new Snapshot(s.keys, vs);
                return;
            }
            int at = -i - 1;
            int n = s.keys.length;
            int[] ks = new int[n + 1];
            FfmQueuePair[] vs = new FfmQueuePair[n + 1];
            System.arraycopy(s.keys, 0, ks, 0, at);
            System.arraycopy(s.values, 0, vs, 0, at);
            ks[at] = key;
            vs[at] = v;
            System.arraycopy(s.keys, at, ks, at + 1, n - at);
            System.arraycopy(s.values, at, vs, at + 1, n - at);
            snapshot = new Snapshot(ks, vs);
        }

        synchronized void remove(int key, FfmQueuePair v) {
            Snapshot s = snapshot;
            int i = Arrays.binarySearch(s.keys, key);
            if (i < 0 || s.values[i] != v) {
                return;
            }
            int n = s.keys.length;
            int[] ks = new int[n - 1];
            FfmQueuePair[] vs = new FfmQueuePair[n - 1];
            System.arraycopy(s.keys, 0, ks, 0, i);
            System.arraycopy(s.values, 0, vs, 0, i);
            System.arraycopy(s.keys, i + 1, ks, i, n - i - 1);
            System.arraycopy(s.values, i + 1, vs, i, n - i - 1);
            snapshot = new Snapshot(ks, vs);
        }
    }
}
