package org.rdmashuffle.transport.verbs;

import static org.rdmashuffle.transport.verbs.RdmaCore.getLong;
import static org.rdmashuffle.transport.verbs.RdmaCore.state;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.util.concurrent.RejectedExecutionException;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The rdma_cm listener of a {@code java.lang.foreign} device: bound to the node's address, listening on a
 * port rdma_cm picks; on the connection-manager thread it creates and accepts a queue pair for each
 * connect request the node admits and rejects the others before any queue pair exists, and keeps the
 * accepted queue pairs' connections.
 */
final class FfmListener {
    private static final Logger LOG = LoggerFactory.getLogger(FfmListener.class);
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
    private final FfmConnectionManager cm;
    private final Object listenerLock = new Object();
    private long listenId;
    private boolean accepting = true;
    /** Connect requests refused for too many pending accepts (the cm thread's). */
    private long refusedFloods;

    FfmListener(FfmDevice device, FfmQueuePairs queuePairs, FfmConnectionManager cm) {
        this.device = device;
        this.core = device.core;
        this.node = device.node;
        this.queuePairs = queuePairs;
        this.cm = cm;
    }

    /**
     * Creates the listener's id and binds it to {@code bind} (destroy it with {@link #destroy}).
     *
     * @return the verbs context of the device that serves the address, or 0 for none
     */
    long bind(InetSocketAddress bind) throws Throwable {
        listenId = cm.createId();
        bindId(bind, " (is the address on an RDMA device? see `rdma link show`)");
        return getLong(listenId + RdmaCore.ID_VERBS);
    }

    private void bindId(InetSocketAddress bind, String hint) throws Throwable {
        try (Arena a = Arena.ofConfined()) {
            if ((int) core.bindAddr.invokeExact(state(), RdmaCore.at(listenId),
                    SocketAddresses.sockaddr(a, bind)) != 0) {
                throw new TransportException("verbs: cannot listen with rdma_cm on " + bind.getHostString() + ": "
                        + core.lastError() + hint);
            }
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
            listenId = cm.createId();
            FfmDevice.call(() -> {
                int r = (int) core.destroyId.invokeExact(RdmaCore.at(taken));
            });
            bindId(bind, "");
        }
        InetSocketAddress local = SocketAddresses.read(listenId + RdmaCore.ID_SRC_ADDR);
        if (local == null || local.getPort() <= 0) {
            throw new TransportException("verbs: rdma_cm listener reports no port");
        }
        return local;
    }

    /** Stops accepting and destroys the listener's id. */
    void destroy() {
        cm.lock().lock(); // before listenerLock, as the cm thread takes them
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
            cm.lock().unlock();
        }
    }

    /**
     * On the cm thread, holding the cm lock: a peer asks to connect. Admitted queue pairs
     * ({@link VerbsNode#admitQueuePair}: the caps, and with authentication on the proof its request
     * carries) are created and accepted; others are rejected before any queue pair exists.
     */
    void onConnectRequest(long id, byte[] privateData) {
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
        FfmQueuePair created = null;
        try {
            created = new FfmQueuePair(device, true, entry);
            created.start(id);
            queuePairs.add(id, created);
        } catch (RuntimeException e) { // nothing throws here today; a bug must not hold the caps and the domain
            LOG.warn("verbs: accepting a queue pair from {} failed: {}", from, e.toString());
            if (created != null) {
                created.closeQuietly();
            } else {
                entry.gone();
                entry.destroyed();
                FfmDevice.call(() -> {
                    int r = (int) core.reject.invokeExact(RdmaCore.at(id), MemorySegment.NULL, (byte) 0);
                    r = (int) core.destroyId.invokeExact(RdmaCore.at(id));
                });
            }
            return;
        }
        FfmQueuePair qp = created;
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
