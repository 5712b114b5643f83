package org.rdmashuffle.transport.verbs;

import com.ibm.disni.RdmaActiveEndpoint;
import com.ibm.disni.RdmaActiveEndpointGroup;
import com.ibm.disni.verbs.IbvWC;
import com.ibm.disni.verbs.RdmaCmEvent;
import com.ibm.disni.verbs.RdmaCmId;
import java.io.IOException;

/**
 * One RC queue pair and its rdma_cm id. Client endpoints belong to a {@link VerbsChannel}, which gets
 * their completions; server endpoints (accepted) only let a peer READ this node's regions. DiSNI's
 * own {@code connect} waits without a bound, so a connect in progress is interrupted when rdma_cm
 * reports it failed (rejected, unreachable, address or route error) or the connect timeout passes.
 */
final class VerbsEndpoint extends RdmaActiveEndpoint {
    private static final int ADDR_ERROR = RdmaCmEvent.EventType.RDMA_CM_EVENT_ADDR_ERROR.ordinal();
    private static final int ROUTE_ERROR = RdmaCmEvent.EventType.RDMA_CM_EVENT_ROUTE_ERROR.ordinal();
    private static final int CONNECT_ERROR = RdmaCmEvent.EventType.RDMA_CM_EVENT_CONNECT_ERROR.ordinal();
    private static final int UNREACHABLE = RdmaCmEvent.EventType.RDMA_CM_EVENT_UNREACHABLE.ordinal();
    private static final int REJECTED = RdmaCmEvent.EventType.RDMA_CM_EVENT_REJECTED.ordinal();
    private static final int DISCONNECTED = RdmaCmEvent.EventType.RDMA_CM_EVENT_DISCONNECTED.ordinal();
    private static final int DEVICE_REMOVAL = RdmaCmEvent.EventType.RDMA_CM_EVENT_DEVICE_REMOVAL.ordinal();
    private static final int ESTABLISHED = RdmaCmEvent.EventType.RDMA_CM_EVENT_ESTABLISHED.ordinal();

    private final VerbsNode node;
    private final boolean serverSide;
    volatile VerbsChannel channel;
    private Thread connecting;
    private String failure;
    private boolean connectOver;
    private boolean established;
    private boolean acceptAborted;

    VerbsEndpoint(VerbsNode node, RdmaActiveEndpointGroup<VerbsEndpoint> group, RdmaCmId id, boolean serverSide)
            throws IOException {
        super(group, id, serverSide);
        this.node = node;
        this.serverSide = serverSide;
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
        java.net.InetAddress ip = from instanceof java.net.InetSocketAddress a ? a.getAddress() : null;
        if (ip == null || !node.mayAccept(ip)) {
            getIdPriv().destroyQP();
            node.dropRefused(this);
            throw new IOException("queue pair from " + from + " refused: not announced by an authenticated peer");
        }
        // DiSNI's accept waits for ESTABLISHED without a bound, on the node's only acceptor thread: a peer
        // that goes away mid-handshake must not stop every later accept.
        long timeoutMs = node.connectTimeoutMs();
        node.schedule(() -> abortAccept("no connection within " + timeoutMs + " ms"), timeoutMs);
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

    /** Runs on DiSNI's completion thread; {@code wc} is reused by DiSNI, so only its fields are passed on. */
    @Override
    public void dispatchCqEvent(IbvWC wc) {
        VerbsChannel c = channel;
        if (c != null) {
            c.onCompletion(this, wc.getWr_id(), wc.getStatus());
        }
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
            node.endpointDisconnected(this, serverSide);
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

    /** Closes, never throwing; DiSNI waits at most a second for the disconnect. */
    void closeQuietly() {
        try {
            close();
        } catch (Exception e) {
            node.logClose(this, e);
        }
    }
}
