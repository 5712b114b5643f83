package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.LongAdder;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.Registrar;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.NodeStats;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.PeerChannels;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.Realms;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.SinkRegistrar;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A node of the verbs provider: an rdma_cm listener whose accepted RC queue pairs let peers READ this
 * node's regions without this node's CPU, a protection domain (plus one per realm it serves: {@link RealmDomains}),
 * and one completion queue (polled by the device's completion thread) for the queue pairs of its channels. The
 * device side is reached through {@code java.lang.foreign} or DiSNI ({@link VerbsDevice},
 * {@code spark.shuffle.rdma.verbs.api}); everything here is the same for both.
 *
 * <p>Connection set-up and the small two-sided control messages go over an authenticated TCP control
 * connection (the tcp provider's handshake and framing, at the port this node advertises): a peer
 * learns the rdma_cm port there, and a READ the peer refuses is diagnosed there. READ data never
 * crosses it.
 *
 * <p>The node's jobs are in classes of their own: the control path ({@link VerbsControl}), opening
 * channels ({@link ChannelOpener}), who may connect a queue pair here ({@link QueuePairAcceptor}),
 * registered memory ({@link VerbsMemory}) and the completion queue's room ({@link CompletionRoom}). What
 * stays here starts and closes them, keeps the channels by peer, checks their timeouts, handles a device
 * that stops working, and counts.
 */
public final class VerbsNode implements RdmaNode {
    private static final Logger LOG = LoggerFactory.getLogger(VerbsNode.class);
    public static final String PROVIDER = "verbs";

    private final RdmaShuffleConf conf;
    private final QueuePairParameters queuePairs;
    /** The most READs any channel keeps outstanding; each queue pair's send queue holds this many. */
    private final int credits;
    private final String device;
    private final VerbsDevice verbs;
    /** Which API reaches rdma-core, and why it was chosen. */
    private final String api;
    private final int rdmaPort;
    private final VerbsControl control;
    private final NodeAddress address;
    private final ScheduledExecutorService timer;
    /** The pause watcher runs while this node is open: its timeouts count running time ({@link Pauses}). */
    private final Pauses.Lease pauseWatch;
    private final ExecutorService worker;
    private final VerbsMemory memory;
    private final PeerChannels<VerbsChannel> channels = new PeerChannels<>(this::ensureOpen, VerbsChannel::close);
    private final CompletionRoom completionRoom;
    private final LongAdder readsCompleted = new LongAdder();
    private final LongAdder readsFailed = new LongAdder();
    private final LongAdder bytesRead = new LongAdder();
    private final LongAdder readsPosted = new LongAdder();
    private final LongAdder reconnects = new LongAdder();
    private volatile boolean closed;
    private volatile Throwable failure;
    private final ChannelOpener opener;
    /** Who may connect a queue pair to this node: caps, admissions, refusals, idle reaping. */
    private final QueuePairAcceptor acceptor;
    /** Tags of the queue pairs this node's channels post on ({@link WorkRequestIds}); 0 is never one. */
    private final AtomicInteger queuePairTags = new AtomicInteger();
    private final KeptRegions kept = new KeptRegions();
    /** The protection domain of each realm this node serves (a node with secrets per realm); else null. */
    private final RealmDomains domains;

    public VerbsNode(RdmaShuffleConf conf, NodeOptions options) throws IOException {
        this(conf, options, VerbsApis.choose(conf.verbsApi()));
    }

    /** With the device reached through {@code choice} (tests: a device emulated in the JVM). */
    VerbsNode(RdmaShuffleConf conf, NodeOptions options, VerbsApis.Choice choice) throws IOException {
        this.conf = conf;
        this.domains = options.secrets() == null ? null : new RealmDomains(this::verbsDevice);
        this.acceptor = new QueuePairAcceptor(conf, options.secret(), options.secrets(), domains);
        this.queuePairs = QueuePairParameters.of(conf);
        if (queuePairs.readDepth() < conf.verbsMaxQpReadAtoms()) {
            LOG.info("verbs: {}={} lowered to {}, the most rdma_cm carries",
                    conf.keyName(RdmaShuffleConf.VERBS_MAX_READ_ATOMS), conf.verbsMaxQpReadAtoms(), queuePairs.readDepth());
        }
        this.credits = queuePairs.maxReadWindow(conf.maxReadsInFlightPerPeer());
        this.completionRoom = new CompletionRoom(this, conf.verbsCompletionQueueSize());
        InetSocketAddress bind = new InetSocketAddress(options.bindHost(), 0);
        if (bind.isUnresolved()) {
            throw new TransportException("verbs: cannot resolve bind host " + options.bindHost());
        }
        this.timer = Executors.newSingleThreadScheduledExecutor(daemon("rdma-verbs-timer"));
        this.worker = Executors.newCachedThreadPool(daemon("rdma-verbs-worker"));
        VerbsDevice d = null;
        VerbsControl c = null;
        try {
            d = choice.factory().open(this, bind, queuePairs, credits, conf.verbsCompletionQueueSize(),
                    conf.verbsEventTimeoutMs());
            this.verbs = d;
            if (options.usesRealms() && !d.carriesProof()) {
                throw new IllegalArgumentException(VerbsApis.REALMS_NEED_PRIVATE_DATA);
            }
            this.api = d.api() + " (" + conf.naming(choice.why()) + ")";
            this.device = d.name();
            this.memory = new VerbsMemory(this, d, domains);
            this.rdmaPort = d.port();
            c = new VerbsControl(this, conf, options);
            this.control = c;
            this.opener = new ChannelOpener(this, conf, d, c, options.secret());
        } catch (IOException | RuntimeException | LinkageError e) {
            if (c != null) {
                c.close();
            }
            if (d != null) {
                d.close();
            }
            timer.shutdownNow();
            worker.shutdownNow();
            throw e;
        }
        int port = control.tcp().localAddress().port();
        this.address = new NodeAddress(options.advertisedHost(), port, PROVIDER);
        long tick = Math.max(10, Math.min(Math.min(Math.min(1000, conf.requestTimeoutMs() / 4),
                conf.verbsStallCheckMs() / 2), conf.idleTimeoutMs() / 6));
        timer.scheduleWithFixedDelay(this::checkTimeouts, tick, tick, TimeUnit.MILLISECONDS);
        this.pauseWatch = Pauses.watch();
        LOG.info("verbs node listening on {} ({} through {}, rdma_cm port {}, at most {} READs in flight per channel, "
                + "completion queue {}, retry_count {}, rnr_retry_count {})", address, device, api, rdmaPort, credits,
                conf.verbsCompletionQueueSize(), queuePairs.retryCount(), queuePairs.rnrRetryCount());
    }

    private static java.util.concurrent.ThreadFactory daemon(String name) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            int i = n.getAndIncrement();
            Thread t = new Thread(r, i == 0 ? name : name.replaceFirst("-(\\d+)$", "-" + i + "-$1"));
            t.setDaemon(true);
            return t;
        };
    }

    // ---- parts ----

    QueuePairAcceptor acceptor() {
        return acceptor;
    }

    private VerbsDevice verbsDevice() {
        return verbs;
    }

    /** The protection domain of each realm this node serves, or null when it serves none. */
    RealmDomains domains() {
        return domains;
    }

    VerbsMemory memory() {
        return memory;
    }

    boolean isClosed() {
        return closed;
    }

    // ---- control messages ----

    CompletableFuture<ByteBuffer> userCall(NodeAddress peer, ByteBuffer request) {
        return control.userCall(peer, request);
    }

    /** How a channel learns what a READ would get at its peer. */
    interface Diagnosis {
        int diagnose(NodeAddress peer, int rkey, long addr, int len) throws IOException;
    }

    private volatile Diagnosis diagnosis = this::askPeer;

    /** Tests: how this node's channels diagnose READs from now on (a stand-in for the peer). */
    void diagnoseWith(Diagnosis d) {
        diagnosis = d;
    }

    /** What a READ of {@code len} bytes at {@code addr} under {@code rkey} would get at {@code peer}. */
    int diagnose(NodeAddress peer, int rkey, long addr, int len) throws IOException {
        return diagnosis.diagnose(peer, rkey, addr, len);
    }

    private int askPeer(NodeAddress peer, int rkey, long addr, int len) throws IOException {
        return control.askPeer(peer, rkey, addr, len);
    }

    /** See {@link VerbsControl#sendKeepAlive}. */
    void sendKeepAlive(VerbsChannel c, NodeAddress peer, InetSocketAddress qp) {
        control.sendKeepAlive(c, peer, qp);
    }

    // ---- connections ----

    @Override
    public NodeAddress localAddress() {
        return address;
    }

    @Override
    public RdmaChannel connect(NodeAddress peer) throws TransportException {
        if (!PROVIDER.equals(peer.provider())) {
            throw new TransportException("cannot reach " + peer + " from a verbs node: providers differ");
        }
        long waitMs = (conf.connectTimeoutMs() + conf.connectRetryWaitMs()) * (conf.connectRetries() + 1) * 2 + 1000;
        return channels.get(peer, waitMs, opener::open);
    }

    /**
     * A connected client queue pair to {@code target}, {@code peer}'s rdma_cm listener; see
     * {@link ChannelOpener#openEndpoint}.
     */
    QueuePair openEndpoint(NodeAddress peer, InetSocketAddress target, long timeoutMs) throws IOException {
        return opener.openEndpoint(peer, target, timeoutMs);
    }

    /** See {@link ChannelOpener#announce}. */
    byte[] announce(NodeAddress peer) throws IOException {
        return opener.announce(peer);
    }

    /** A queue pair to {@code target} whose connect request carries {@code privateData} (tests: after {@link #announce}). */
    QueuePair connectAnnounced(InetSocketAddress target, long timeoutMs, byte[] privateData) throws IOException {
        ensureOpen();
        return verbs.connect(target, timeoutMs, privateData);
    }

    /**
     * A peer asks for a queue pair from {@code from}, its connect request carrying {@code privateData}
     * (null: none, or the device cannot tell): admitted when the caps leave room
     * ({@code maxConnections}, {@code maxConnectionsPerAddress}) and, with authentication on, an
     * authenticated peer announced it (with a valid proof where one was asked for). Called before the
     * queue pair exists, so a refused one never reaches RTR or RTS. The device reports the admitted queue
     * pair connected and gone through the returned entry; a refusal is counted and logged (bounded).
     *
     * @return the admitted queue pair's entry, or null when refused
     */
    AcceptedQueuePairs.Entry admitQueuePair(InetSocketAddress from, byte[] privateData) {
        return acceptor.admitQueuePair(from, privateData);
    }

    /** Whether this node's device reads proofs in rdma_cm private data. */
    boolean carriesProof() {
        return verbs.carriesProof();
    }

    /** Queue pairs accepted now (connecting or connected), for tests and diagnosis. */
    int acceptedQueuePairs() {
        return acceptor.size();
    }

    /** Accepted queue pairs closed because no keep-alive named them for spark.shuffle.rdma.idleTimeout. */
    long queuePairsReaped() {
        return acceptor.reaped();
    }

    /** A fresh tag for a queue pair a channel starts posting on (never {@link WorkRequestIds#NO_TAG}). */
    int nextQueuePairTag() {
        for (;;) {
            int t = queuePairTags.incrementAndGet();
            if (t != WorkRequestIds.NO_TAG) {
                return t;
            }
        }
    }

    /** See {@link VerbsDevice#afterCompletionsPolled}. */
    void afterCompletionsPolled(Runnable r) {
        verbs.afterCompletionsPolled(r);
    }

    /** The port this node's rdma_cm listens on. */
    int rdmaPort() {
        return rdmaPort;
    }

    /** {@code n} READs accepted by one of this node's channels. */
    void countPosted(int n) {
        readsPosted.add(n);
    }

    /** A channel's queue pair was replaced after an error. */
    void countReconnect() {
        reconnects.increment();
    }

    /** Queue pairs this node refused (past a cap, or no authenticated peer announced them). */
    long queuePairsRefused() {
        return acceptor.refused();
    }

    /** An accept that was ended because its connection never came (logged at DEBUG: peers can cause it). */
    void noteAbortedAccept(String why) {
        LOG.debug("verbs: gave up accepting a queue pair: {}", why);
    }

    long connectTimeoutMs() {
        return conf.connectTimeoutMs();
    }

    /** The ToS byte for this node's rdma_cm ids ({@code spark.shuffle.rdma.verbs.tos}), or -1 for rdma_cm's. */
    int verbsTos() {
        return conf.verbsTos();
    }

    /** Whether a bind address was set: outgoing connections then leave from the listener's address. */
    boolean bindAddressSet() {
        return !conf.bindAddress().isBlank();
    }

    /** What this node's queue pairs are connected and accepted with. */
    QueuePairParameters queuePairParameters() {
        return queuePairs;
    }

    /** A queue pair from a peer was accepted. */
    void acceptedQueuePair() {
        if (LOG.isDebugEnabled()) {
            LOG.debug("accepted a queue pair on {}: retry_count={}, rnr_retry_count={}", device,
                    queuePairs.retryCount(), queuePairs.rnrRetryCount());
        }
    }

    /**
     * A client queue pair disconnected (the peer closed or went away), on the device's connection-manager
     * thread: nothing here may close a queue pair inline.
     */
    void queuePairDisconnected(QueuePair qp) {
        if (closed) {
            return; // close() closes every queue pair itself
        }
        VerbsChannel c = qp.channel();
        if (c != null) {
            c.onDisconnected(qp);
        }
    }

    /**
     * The device stopped working (its completion thread cannot go on): every channel fails now rather
     * than time out, and the node opens no new ones.
     */
    void deviceFailed(String why) {
        if (closed || failure != null) {
            return;
        }
        failure = new TransportException("verbs: " + why, ReadStatus.CONNECTION_LOST, null);
        LOG.error("verbs node {} stopped working: {}; its channels fail and it opens no new ones", address, why);
        execute(() -> {
            for (VerbsChannel c : channels.all()) {
                c.fail(ReadStatus.CONNECTION_LOST, why);
            }
        });
    }

    @Override
    public Throwable failure() {
        return failure;
    }

    /** The RDMA device this node runs on (e.g. {@code siw0}, {@code mlx5_0}). */
    public String device() {
        return device;
    }

    /** Which API reaches rdma-core ({@code java.lang.foreign} or {@code DiSNI}) and why it was chosen. */
    public String api() {
        return api;
    }

    void channelClosed(VerbsChannel c) {
        channels.remove(c);
        completionRoom.forget(c);
    }

    // ---- completions ----

    /** See {@link CompletionRoom#take}. */
    int takeCompletionRoom(int want) {
        return completionRoom.take(want);
    }

    /** See {@link CompletionRoom#giveBack}. */
    void returnCompletionRoom(int n) {
        completionRoom.giveBack(n);
    }

    /** See {@link CompletionRoom#await}. */
    void waitingForRoom(VerbsChannel c) {
        completionRoom.await(c);
    }

    void countRead(int status, int len) {
        if (status == ReadStatus.SUCCESS) {
            readsCompleted.increment();
            bytesRead.add(len);
        } else {
            readsFailed.increment();
        }
    }

    /** Completes a READ that was never posted, off the caller's thread. */
    void completeLater(ReadListener l, long requestId, int status) {
        countRead(status, 0);
        execute(() -> {
            try {
                l.onReadComplete(requestId, status, 0);
            } catch (RuntimeException e) {
                LOG.error("READ listener failed for request {}", requestId, e);
            }
        });
    }

    void execute(Runnable r) {
        try {
            worker.execute(r);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            r.run(); // closing: run here rather than lose a completion
        }
    }

    ScheduledFuture<?> schedule(Runnable r, long delayMs) {
        return timer.schedule(r, delayMs, TimeUnit.MILLISECONDS);
    }

    private void checkTimeouts() {
        verbs.checkPorts(); // before any channel times out: a local link failure is this node's, not a peer's
        long now = System.nanoTime();
        long idleNanos = TimeUnit.MILLISECONDS.toNanos(conf.idleTimeoutMs());
        for (VerbsChannel c : channels.all()) {
            try {
                c.checkTimeouts(now, idleNanos / 3);
            } catch (RuntimeException e) {
                LOG.warn("verbs: checking the channel to {} failed", c.peer(), e); // the next channel is checked still
            }
        }
        acceptor.reapIdle(this, now, idleNanos);
    }

    void logClose(QueuePair ep, Exception e) {
        LOG.debug("closing endpoint {} failed", ep, e);
    }

    // ---- memory ----

    /**
     * {@inheritDoc} On a node with secrets per realm, memory served to {@code realm} is registered in that realm's
     * protection domain (opened on first use), which only the queue pairs accepted for the realm are in; READ
     * sinks and memory of no realm go in the default domain, which no accepted queue pair of such a node is in.
     * On a node without realms {@code realm} changes nothing.
     */
    @Override
    public MemoryRegion register(ByteBuffer directBuffer, RegionAccess access, String realm) throws IOException {
        if (realm != null) {
            Realms.requireValid(realm);
        }
        if (!directBuffer.isDirect()) {
            throw new IllegalArgumentException("only direct buffers can be registered");
        }
        return memory.add(directBuffer.duplicate().clear(), access, false, realm);
    }

    /**
     * Registers a byte range of a file for remote READ. Devices that pin through the kernel's common
     * path register a read-only shared mapping. Software devices (siw, rxe) pin every page for writing
     * and refuse read-only mappings; then the file is mapped read-write (never written), and where it
     * cannot be opened for writing its bytes are copied into registered memory. Each step down is logged
     * once per node. {@code realm} as for {@link #register(ByteBuffer, RegionAccess, String)}.
     */
    @Override
    public MemoryRegion registerFile(Path file, long offset, int length, String realm) throws IOException {
        if (realm != null) {
            Realms.requireValid(realm);
        }
        return memory.registerFile(file, null, file.toString(), offset, length, realm);
    }

    /** As {@link #registerFile(Path, long, int, String)}; a read-write mapping is replaced by a copy. */
    @Override
    public MemoryRegion registerFile(FileChannel file, String name, long offset, int length, String realm)
            throws IOException {
        if (realm != null) {
            Realms.requireValid(realm);
        }
        return memory.registerFile(null, file, name, offset, length, realm);
    }

    /**
     * {@inheritDoc} Closes the queue pairs peers connected for {@code realm} (their peers see a disconnect, and
     * READs through them fail) and forgets the admissions pending for it; the realm's protection domain is
     * deallocated once its regions are closed too (by their owners). A later registration or queue pair for
     * the realm opens a fresh domain, for a realm its secrets resolver still knows. Nothing on a node without
     * realms.
     */
    @Override
    public void closeRealm(String realm) {
        Realms.requireValid(realm);
        if (domains != null && !closed) {
            acceptor.closeRealm(this, realm);
        }
    }

    void deregistered(VerbsRegion r) {
        memory.deregistered(r);
    }

    /** {@code r}'s deregistration failed: it is kept for good, and this node fails (to the engine's path). */
    void deregistrationFailed(VerbsRegion r, Exception why) {
        kept.keep(r, why, address);
        deviceFailed("deregistering a region failed (" + why.getMessage() + "); its memory is kept");
    }

    @Override
    public Registrar sinkRegistrar() {
        return new SinkRegistrar(this, () -> closed);
    }

    /**
     * Counters. READs served to peers are not counted: with one-sided READs this node's CPU never sees
     * them (readsServed, readsRefused and bytesServed stay 0).
     */
    @Override
    public NodeStats stats() {
        int open = 0;
        for (VerbsChannel c : channels.all()) {
            if (c.isOpen()) {
                open++;
            }
        }
        return new NodeStats(readsCompleted.sum(), readsFailed.sum(), bytesRead.sum(), 0, 0, 0, memory.regionCount(),
                memory.registeredBytes(), open, readsPosted.sum(), opener.channelsOpened(), reconnects.sum(),
                acceptor.refused() + control.tcp().stats().connectionsRefused(), KeptRegions.count(),
                control.tcp().stats().connectionsEvictedIdle());
    }

    void ensureOpen() throws TransportException {
        if (closed) {
            throw new TransportException("node " + address + " is closed", ReadStatus.CHANNEL_CLOSED, null);
        }
        Throwable f = failure;
        if (f != null) {
            throw new TransportException("node " + address + " stopped working: " + f.getMessage(),
                    ReadStatus.CONNECTION_LOST, f);
        }
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        timer.shutdownNow();
        for (VerbsChannel c : channels.all()) {
            c.fail(ReadStatus.CHANNEL_CLOSED, "node closed");
        }
        verbs.closeListener();
        memory.closeAll();
        worker.shutdown();
        try {
            if (!worker.awaitTermination(5, TimeUnit.SECONDS)) {
                worker.shutdownNow();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        try {
            verbs.close(); // joins the device's threads, each within spark.shuffle.rdma.verbs.eventTimeout
            control.close();
        } finally {
            pauseWatch.close();
        }
        LOG.info("verbs node {} closed: {} READs completed ({} bytes), {} failed", address, readsCompleted.sum(),
                bytesRead.sum(), readsFailed.sum());
    }
}
