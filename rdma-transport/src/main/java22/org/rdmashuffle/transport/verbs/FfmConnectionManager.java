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
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantLock;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The rdma_cm side of a {@code java.lang.foreign} device: its event channel, the ids of its client queue
 * pairs ({@link #connect}) and of its listener ({@link FfmListener}), and the connection-manager thread,
 * which takes each event from the channel and hands it to its queue pair or, for a connect request, to the
 * listener. rdma_cm's DEVICE_REMOVAL fails the node, and a disconnect has the device's ports checked
 * ({@link LocalPorts}) before any channel hears of it.
 */
final class FfmConnectionManager {
    private static final Logger LOG = LoggerFactory.getLogger(FfmConnectionManager.class);

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
    private final FfmListener listener;
    /**
     * Held by the cm thread while it takes, acknowledges and handles an event, and while any id is
     * destroyed: librdmacm changes a queue pair's state inside rdma_get_cm_event, so an id must not be
     * destroyed meanwhile, and no event of a destroyed id can then reach a new id at the same address.
     */
    private final ReentrantLock cmLock = new ReentrantLock();
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
        this.listener = new FfmListener(device, queuePairs, this);
    }

    FfmListener listener() {
        return listener;
    }

    /** The cm lock (see above): taken before the listener's own. */
    ReentrantLock lock() {
        return cmLock;
    }

    /** A new rdma_cm id on this device's event channel, with the node's ToS (a listener's). */
    long createId() throws Throwable {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment idOut = a.allocate(ADDRESS);
            FfmDevice.check(core, (int) core.createId.invokeExact(state(), eventChannel, idOut, MemorySegment.NULL,
                    RdmaCore.RDMA_PS_TCP), "rdma_create_id");
            long id = idOut.get(ADDRESS, 0).address();
            try {
                setTos(a, id);
            } catch (Throwable t) {
                FfmDevice.call(() -> {
                    int r = (int) core.destroyId.invokeExact(RdmaCore.at(id));
                });
                throw t;
            }
            return id;
        }
    }

    /**
     * Sets {@code spark.shuffle.rdma.verbs.tos} on {@code id} (rdma_set_option, RDMA_OPTION_ID_TOS: a uint8_t),
     * before the id binds, listens or resolves a route; nothing when it is -1 (rdma_cm's default stays).
     */
    private void setTos(Arena a, long id) throws Throwable {
        int tos = node.verbsTos();
        if (tos < 0) {
            return;
        }
        MemorySegment value = a.allocate(1);
        value.set(JAVA_BYTE, 0, (byte) tos);
        if ((int) core.setOption.invokeExact(state(), RdmaCore.at(id), RdmaCore.RDMA_OPTION_ID,
                RdmaCore.RDMA_OPTION_ID_TOS, value, 1L) != 0) {
            throw new TransportException("verbs: rdma_set_option(RDMA_OPTION_ID_TOS, " + tos + ") failed: "
                    + core.lastError() + " (" + RdmaShuffleConf.VERBS_TOS.name() + ")");
        }
    }

    /**
     * A client queue pair connected to {@code target} from {@code from}, within {@code timeoutMs}; see
     * {@link VerbsDevice#connect}. Holds {@code lifecycle} (the device's read lock) while it uses the event
     * channel.
     */
    QueuePair connect(InetSocketAddress from, InetSocketAddress target, long timeoutMs, byte[] privateData,
                      Lock lifecycle) throws IOException {
        FfmQueuePair qp = new FfmQueuePair(device, false, null);
        qp.privateData(privateData);
        IOException failed = null;
        lifecycle.lock();
        try (Arena a = Arena.ofConfined()) {
            if (device.closed()) {
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
            queuePairs.add(id, qp);
            setTos(a, id);
            qp.resolve(SocketAddresses.sockaddr(a, from), SocketAddresses.sockaddr(a, target),
                    (int) Math.min(Integer.MAX_VALUE, timeoutMs));
        } catch (IOException e) {
            failed = e.getMessage() != null && e.getMessage().startsWith("rdma_cm") ? e
                    : new IOException("rdma_cm connect to " + target + " failed: " + e.getMessage(), e);
        } catch (Throwable t) {
            failed = new IOException("rdma_cm connect to " + target + " failed: " + t, t);
        } finally {
            lifecycle.unlock();
        }
        if (failed != null) {
            qp.closeQuietly();
            throw failed;
        }
        qp.awaitConnected(target, timeoutMs);
        return qp;
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
                listener.onConnectRequest(id, privateData);
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
}
