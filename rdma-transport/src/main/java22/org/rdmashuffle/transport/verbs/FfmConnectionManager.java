package org.rdmashuffle.transport.verbs;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_SHORT;
import static org.rdmashuffle.transport.verbs.RdmaCore.getInt;
import static org.rdmashuffle.transport.verbs.RdmaCore.getLong;
import static org.rdmashuffle.transport.verbs.RdmaCore.state;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.locks.ReentrantLock;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The rdma_cm side of a {@code java.lang.foreign} device: its listener (bound to the node's address,
 * listening on a port rdma_cm picks), and the connection-manager thread, which takes each event from the
 * event channel and hands it to its queue pair, creates and accepts a queue pair for each connect request
 * the node admits, and rejects the others before any queue pair exists.
 */
final class FfmConnectionManager {
    private static final Logger LOG = LoggerFactory.getLogger(FfmConnectionManager.class);
    /** errno EADDRINUSE (Linux). */
    private static final int EADDRINUSE = 98;
    /**
     * Accepted queue pairs that may wait for their connection at once; further connect requests are
     * refused, so that a flood of requests that never complete cannot take every queue pair of the device.
     */
    private static final int MAX_PENDING_ACCEPTS = 256;
    /** Ports an rdma_cm listener tries when the ones it picked are TCP ports in use (iWARP). */
    private static final int LISTEN_ATTEMPTS = 8;

    private final FfmDevice device;
    private final RdmaCore core;
    private final VerbsNode node;
    private final FfmQueuePairs queuePairs;
    private final MemorySegment eventChannel;
    private final int eventFd;
    private final int eventTimeoutMs;
    // The thread's native memory, allocated once: rdma_get_cm_event's result, a pollfd.
    private final MemorySegment evOut;
    private final MemorySegment pfd;
    private final Object listenerLock = new Object();
    /**
     * Held by the cm thread while it takes, acknowledges and handles an event, and while any id is
     * destroyed: librdmacm changes a queue pair's state inside rdma_get_cm_event, so an id must not be
     * destroyed meanwhile, and no event of a destroyed id can then reach a new id at the same address.
     */
    private final ReentrantLock cmLock = new ReentrantLock();
    private long listenId;
    private boolean accepting = true;
    /** Connect requests refused for too many pending accepts (the cm thread's). */
    private long refusedFloods;
    /** Whether close() left native resources alone (a thread did not stop); guarded by cmLock. */
    private boolean released;
    /** Told of rdma_cm's DEVICE_REMOVAL (the node's own failure), and checks the ports on a disconnect. */
    private LocalPorts ports;
    private Thread thread;

    /** Its native memory comes from {@code arena} (the device's, closed once this thread has stopped). */
    FfmConnectionManager(FfmDevice device, Arena arena, FfmQueuePairs queuePairs, MemorySegment eventChannel,
                         int eventFd, int eventTimeoutMs) {
        this.device = device;
        this.core = device.core;
        this.node = device.node;
        this.queuePairs = queuePairs;
        this.eventChannel = eventChannel;
        this.eventFd = eventFd;
        this.eventTimeoutMs = eventTimeoutMs;
        this.evOut = arena.allocate(ADDRESS);
        this.pfd = arena.allocate(8, 8);
    }

    /**
     * Creates the listener's id and binds it to {@code bind} (destroy it with {@link #destroyListener}).
     *
     * @return the verbs context of the device that serves the address, or 0 for none
     */
    long bind(InetSocketAddress bind) throws Throwable {
        listenId = createId();
        try (Arena a = Arena.ofConfined()) {
            if ((int) core.bindAddr.invokeExact(state(), RdmaCore.at(listenId),
                    SocketAddresses.sockaddr(a, bind)) != 0) {
                throw new TransportException("verbs: cannot listen with rdma_cm on " + bind.getHostString() + ": "
                        + core.lastError() + " (is the address on an RDMA device? see `rdma link show`)");
            }
        }
        return getLong(listenId + RdmaCore.ID_VERBS);
    }

    private long createId() throws Throwable {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment idOut = a.allocate(ADDRESS);
            FfmDevice.check(core, (int) core.createId.invokeExact(state(), eventChannel, idOut, MemorySegment.NULL,
                    RdmaCore.RDMA_PS_TCP), "rdma_create_id");
            return idOut.get(ADDRESS, 0).address();
        }
    }

    /**
     * Listens on the bound id.
     *
     * @return the address and port the listener is on
     */
    InetSocketAddress listen(InetSocketAddress bind) throws Throwable {
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
            listenId = createId();
            FfmDevice.call(() -> {
                int r = (int) core.destroyId.invokeExact(RdmaCore.at(taken));
            });
            try (Arena a = Arena.ofConfined()) {
                if ((int) core.bindAddr.invokeExact(state(), RdmaCore.at(listenId),
                        SocketAddresses.sockaddr(a, bind)) != 0) {
                    throw new TransportException("verbs: cannot listen with rdma_cm on " + bind.getHostString()
                            + ": " + core.lastError());
                }
            }
        }
        InetSocketAddress local = SocketAddresses.read(listenId + RdmaCore.ID_SRC_ADDR);
        if (local == null || local.getPort() <= 0) {
            throw new TransportException("verbs: rdma_cm listener reports no port");
        }
        return local;
    }

    /** Starts the connection-manager thread; {@code ports} learn of DEVICE_REMOVAL and disconnects. */
    void start(LocalPorts ports) {
        this.ports = ports;
        thread = new Thread(this::loop, "rdma-verbs-cm-" + device.port());
        thread.setDaemon(true);
        thread.start();
    }

    Thread thread() {
        return thread;
    }

    void destroyListener() {
        cmLock.lock(); // before listenerLock, as the cm thread takes them
        try {
            synchronized (listenerLock) {
                accepting = false;
                if (listenId != 0) {
                    long id = listenId;
                    listenId = 0;
                    FfmDevice.call(() -> {
                        int r = (int) core.destroyId.invokeExact(RdmaCore.at(id));
                    });
                }
            }
        } finally {
            cmLock.unlock();
        }
    }

    /** close() gave up on a thread that did not stop: every native resource is left alone from now on. */
    void released() {
        cmLock.lock();
        try {
            released = true;
        } finally {
            cmLock.unlock();
        }
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
            FfmDevice.call(() -> {
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

    private void loop() {
        while (!device.closed()) {
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
                while (!device.closed() && nextEvent()) {
                    // another event may be waiting
                }
            } catch (InterruptedException e) {
                if (device.closed()) {
                    break;
                }
            } catch (Throwable t) {
                if (device.closed()) {
                    break;
                }
                LOG.warn("verbs: handling an rdma_cm event failed", t);
            }
        }
    }

    /** Takes, acknowledges and handles one rdma_cm event under the cm lock; false when none was waiting. */
    private boolean nextEvent() throws Throwable {
        cmLock.lock();
        try {
            if ((int) core.getCmEvent.invokeExact(state(), eventChannel, evOut) != 0) {
                int errno = RdmaCore.lastErrno();
                if (errno != RdmaCore.EAGAIN && errno != RdmaCore.EINTR && !device.closed()) {
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
                onEvent(id, type, status);
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

    private void onEvent(long id, int type, int status) {
        // Whose failure it is, before any channel hears of it: the device gone, or a local port down.
        if (type == RdmaCore.EV_DEVICE_REMOVAL) {
            ports.deviceRemoved();
        } else if (type == RdmaCore.EV_DISCONNECTED) {
            ports.check();
        }
        FfmQueuePair qp = queuePairs.byId(id);
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
        InetSocketAddress from = SocketAddresses.read(id + RdmaCore.ID_DST_ADDR);
        AcceptedQueuePairs.Entry entry = null;
        synchronized (listenerLock) {
            boolean flooded = queuePairs.pendingAccepts() >= MAX_PENDING_ACCEPTS;
            if (flooded && refusedFloods++ % 1000 == 0) {
                LOG.warn("verbs: {} queue pairs accepted on {} have not connected yet; refusing connect requests "
                        + "(from {}, {} so far) until they connect or time out", MAX_PENDING_ACCEPTS, device.name(),
                        from, refusedFloods);
            }
            if (!flooded && accepting) {
                entry = node.admitQueuePair(from, privateData);
            }
            if (entry == null) {
                FfmDevice.call(() -> {
                    int r = (int) core.reject.invokeExact(RdmaCore.at(id), MemorySegment.NULL, (byte) 0);
                    r = (int) core.destroyId.invokeExact(RdmaCore.at(id));
                });
                return;
            }
        }
        FfmQueuePair qp = new FfmQueuePair(device, true, entry);
        qp.start(id);
        queuePairs.add(id, qp);
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
        } catch (RejectedExecutionException e) {
            qp.closeQuietly(); // the node is closing
        }
    }

    /** An accepted queue pair went away: closed off the connection-manager thread. */
    void acceptedGone(FfmQueuePair qp) {
        if (queuePairs.removeAccepted(qp) || !device.closed()) {
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
        queuePairs.established(qp);
        node.acceptedQueuePair();
    }
}
