package org.rdmashuffle.transport.verbs;

import com.ibm.disni.RdmaActiveEndpointGroup;
import com.ibm.disni.RdmaServerEndpoint;
import com.ibm.disni.verbs.IbvMr;
import com.ibm.disni.verbs.IbvPd;
import com.ibm.disni.verbs.RdmaConnParam;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The verbs device reached through DiSNI 2.1 and its native library libdisni: DiSNI's active endpoint
 * group (its connection-manager and completion threads), an rdma_cm server endpoint with an acceptor
 * thread, and the protection domain of the listener's device. DiSNI's types stay in this class and
 * {@link VerbsEndpoint}.
 */
final class DisniDevice implements VerbsDevice {
    private static final Logger LOG = LoggerFactory.getLogger(DisniDevice.class);
    /** Ports an rdma_cm listener tries when the ones it picked are TCP ports in use (iWARP). */
    private static final int LISTEN_ATTEMPTS = 8;

    private final VerbsNode node;
    private final RdmaActiveEndpointGroup<VerbsEndpoint> group;
    private final RdmaServerEndpoint<VerbsEndpoint> listener;
    private final IbvPd pd;
    private final String name;
    private final int port;
    private final InetAddress address;
    private final Thread acceptor;
    private final Set<VerbsEndpoint> accepted = ConcurrentHashMap.newKeySet();
    private final DisniEvents events;
    private volatile boolean closed;

    /**
     * Listens with rdma_cm on {@code bind}.
     *
     * @param credits   the send queue depth of every queue pair
     * @param cqSize    entries of the shared completion queue
     */
    DisniDevice(VerbsNode node, InetSocketAddress bind, QueuePairParameters queuePairs, int credits, int cqSize,
                int eventTimeoutMs) throws IOException {
        this.node = node;
        RdmaActiveEndpointGroup<VerbsEndpoint> g = null;
        RdmaServerEndpoint<VerbsEndpoint> l = null;
        try {
            g = new RdmaActiveEndpointGroup<>(eventTimeoutMs, false, credits, 1, cqSize);
            // DiSNI connects and accepts every endpoint of the group with the group's parameters. Of them it
            // passes only the two retry counts on to rdma_cm (see QueuePairParameters); both default to 0.
            RdmaConnParam cp = g.getConnParam();
            cp.setRetry_count((byte) queuePairs.retryCount());
            cp.setRnr_retry_count((byte) queuePairs.rnrRetryCount());
            final RdmaActiveEndpointGroup<VerbsEndpoint> fg = g;
            g.init((id, serverSide) -> new VerbsEndpoint(node, this, fg, id, serverSide));
            for (int attempt = 1; ; attempt++) {
                l = g.createServerEndpoint();
                try {
                    l.bind(bind, 256);
                    break;
                } catch (Exception e) {
                    // iWARP listens on a TCP port of the host, while rdma_cm picks ports from its own space:
                    // the one it chose can belong to a TCP socket. Another endpoint gets another port.
                    if (bind.getPort() != 0 || attempt == LISTEN_ATTEMPTS) {
                        throw new TransportException("verbs: cannot listen with rdma_cm on " + bind.getHostString()
                                + ": " + e.getMessage() + (attempt > 1 ? " (" + attempt + " ports tried)" : "")
                                + " (is the address on an RDMA device? see `rdma link show`)", e);
                    }
                    LOG.debug("verbs: listening on {} failed ({}); trying another port", bind, e.toString());
                    RdmaServerEndpoint<VerbsEndpoint> failed = l;
                    l = null;
                    try {
                        failed.close();
                    } catch (Exception closing) {
                        LOG.debug("verbs: closing a listener that failed", closing);
                    }
                }
            }
            IbvPd p = l.getPd();
            if (p == null) {
                throw new TransportException("verbs: no RDMA device serves " + bind.getHostString()
                        + " (rdma_cm bound no device; bind to the address of an RDMA-capable interface)");
            }
            this.pd = p;
            this.name = deviceName(p);
            this.events = new DisniEvents(node, name, LocalPorts.sysfs(name));
            this.port = portOf(l.getSrcAddr());
            this.address = ((InetSocketAddress) l.getSrcAddr()).getAddress();
            this.group = g;
            this.listener = l;
        } catch (IOException | RuntimeException e) {
            closeQuietly(l, g);
            throw e;
        } catch (Exception e) {
            closeQuietly(l, g);
            throw new TransportException("verbs: cannot start: " + e, e);
        }
        if (node.verbsTos() >= 0) {
            LOG.warn("verbs: {}={} is not applied through DiSNI (DiSNI 2.1 has no rdma_set_option); its ids keep "
                    + "rdma_cm's default ToS. Java 22 or later uses the java.lang.foreign path, which sets it",
                    org.rdmashuffle.conf.RdmaShuffleConf.VERBS_TOS.name(), node.verbsTos());
        }
        this.acceptor = new Thread(this::acceptLoop, "rdma-verbs-acceptor-" + port);
        acceptor.setDaemon(true);
        acceptor.start();
    }

    /**
     * The RDMA device behind {@code pd}, for log lines: DiSNI gives the uverbs file descriptor only, whose
     * character device names the device in sysfs.
     */
    private static String deviceName(IbvPd pd) {
        try {
            Path uverbs = Files.readSymbolicLink(Path.of("/proc/self/fd/" + pd.getContext().getCmd_fd()));
            return Files.readString(Path.of("/sys/class/infiniband_verbs", uverbs.getFileName().toString(), "ibdev"))
                    .trim();
        } catch (IOException | RuntimeException e) {
            return "an RDMA device";
        }
    }

    private static int portOf(SocketAddress a) throws TransportException {
        if (a instanceof InetSocketAddress i && i.getPort() > 0) {
            return i.getPort();
        }
        throw new TransportException("verbs: rdma_cm listener reports no port (" + a + ")");
    }

    private static void closeQuietly(RdmaServerEndpoint<VerbsEndpoint> l, RdmaActiveEndpointGroup<VerbsEndpoint> g) {
        try {
            if (l != null) {
                l.close();
            }
        } catch (Exception e) {
            LOG.debug("closing rdma_cm listener", e);
        }
        try {
            if (g != null) {
                g.close();
            }
        } catch (Exception e) {
            LOG.debug("closing DiSNI endpoint group", e);
        }
    }

    /**
     * What its endpoints do with the completions and events DiSNI hands them (set before any endpoint can
     * have one: the listener's port is published only once this device is open).
     */
    DisniEvents events() {
        return events;
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    public String api() {
        return "DiSNI";
    }

    @Override
    public String depths() {
        return "initiator_depth=device max_qp_rd_atom, responder_resources=device max_qp_rd_atom (set by libdisni)";
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
    public Memory register(Domain domain, ByteBuffer memory, int access) throws IOException {
        if (domain != null) {
            throw new TransportException(VerbsApis.REALMS_NEED_PRIVATE_DATA); // openDomain never gives one
        }
        IbvMr mr;
        try {
            mr = pd.regMr(memory, access).execute().free().getMr();
        } catch (IOException | RuntimeException e) {
            throw new TransportException("verbs: registering " + memory.capacity() + " bytes failed: " + e.getMessage()
                    + " (check the locked-memory limit, `ulimit -l`, and the device's max_mr_size)", e);
        }
        if (mr == null) {
            throw new TransportException("verbs: registering " + memory.capacity() + " bytes failed (check the "
                    + "locked-memory limit, `ulimit -l`, and the device's max_mr_size)");
        }
        return new Memory() {
            @Override
            public long address() {
                return mr.getAddr();
            }

            @Override
            public int lkey() {
                return mr.getLkey();
            }

            @Override
            public int rkey() {
                return mr.getRkey();
            }

            @Override
            public void deregister() throws Exception {
                mr.deregMr().execute().free();
            }
        };
    }

    /** DiSNI 2.1's libdisni drops rdma_cm private data on the accepting side: no proofs (docs/verbs.md). */
    @Override
    public boolean carriesProof() {
        return false;
    }

    /** Never: without private data on the accepting side no queue pair can be bound to a realm. */
    @Override
    public Domain openDomain() throws IOException {
        throw new TransportException(VerbsApis.REALMS_NEED_PRIVATE_DATA);
    }

    @Override
    public QueuePair connect(InetSocketAddress target, long timeoutMs, byte[] privateData) throws IOException {
        VerbsEndpoint ep = group.createEndpoint();
        try {
            if (node.bindAddressSet()) {
                // DiSNI resolves with no source address; an id bound first resolves from its bound one.
                ep.getIdPriv().bindAddr(new InetSocketAddress(address, 0));
            }
            ep.connectWithin(target, timeoutMs);
            return ep;
        } catch (IOException | RuntimeException e) {
            ep.closeQuietly();
            throw e;
        }
    }

    private void acceptLoop() {
        while (!closed) {
            try {
                VerbsEndpoint ep = listener.accept();
                ep.handedOver();
                if (closed) {
                    ep.closeQuietly();
                    break;
                }
                if (!ep.established()) { // its accept was ended: the peer went away mid-handshake
                    ep.closeQuietly();
                    continue;
                }
                accepted.add(ep);
                if (!ep.recordConnected()) {
                    // it disconnected before this thread recorded it (acceptedDisconnected found nothing to close)
                    accepted.remove(ep);
                    ep.closeQuietly();
                    continue;
                }
                node.acceptedQueuePair();
            } catch (IOException | RuntimeException e) {
                if (closed) {
                    break;
                }
                LOG.debug("accepting an rdma_cm connection failed", e);
            }
        }
    }

    /**
     * An accepted endpoint disconnected, on DiSNI's connection-manager thread: closed off it, or, when the
     * acceptor has not recorded it yet, by the acceptor once it does ({@link VerbsEndpoint#recordConnected}).
     */
    void acceptedDisconnected(VerbsEndpoint ep) {
        if (ep.recordGone() && !closed && accepted.remove(ep)) {
            node.execute(ep::closeQuietly);
        }
    }

    @Override
    public void checkPorts() {
        events.checkPorts();
    }

    @Override
    public void closeListener() {
        if (closed) {
            return;
        }
        closed = true;
        synchronized (listener) {
            listener.notifyAll(); // DiSNI's accept() waits on the listener without a bound
        }
        acceptor.interrupt();
        try {
            listener.close();
        } catch (Exception e) {
            LOG.debug("closing rdma_cm listener", e);
        }
        try {
            acceptor.join(5_000);
            if (acceptor.isAlive()) {
                LOG.warn("{} did not stop within 5 s", acceptor.getName());
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (VerbsEndpoint ep : accepted) {
            ep.closeQuietly();
        }
        accepted.clear();
    }

    @Override
    public void close() {
        closeListener();
        try {
            group.close(); // joins DiSNI's threads, each within spark.shuffle.rdma.verbs.eventTimeout
        } catch (Exception e) {
            LOG.warn("closing DiSNI's endpoint group failed", e);
        }
    }
}
