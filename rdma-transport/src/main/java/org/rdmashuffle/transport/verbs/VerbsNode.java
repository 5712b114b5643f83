package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.Registrar;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.NodeStats;
import org.rdmashuffle.transport.PeerChannels;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.Realms;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.TransportException;
import org.rdmashuffle.transport.Mappings;
import org.rdmashuffle.transport.Mappings.FileMemory;
import org.rdmashuffle.transport.tcp.TcpNode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A node of the verbs provider: an rdma_cm listener whose accepted RC queue pairs let peers READ this
 * node's regions without this node's CPU, one protection domain for every registration, and one
 * completion queue (polled by the device's completion thread) for the queue pairs of its channels. The
 * device side is reached through {@code java.lang.foreign} or DiSNI ({@link VerbsDevice},
 * {@code spark.shuffle.rdma.verbs.api}); everything here is the same for both.
 *
 * <p>Connection set-up and the small two-sided control messages go over an authenticated TCP control
 * connection (the tcp provider's handshake and framing, at the port this node advertises): a peer
 * learns the rdma_cm port there, and a READ the peer refuses is diagnosed there. READ data never
 * crosses it.
 */
public final class VerbsNode implements RdmaNode {
    private static final Logger LOG = LoggerFactory.getLogger(VerbsNode.class);
    public static final String PROVIDER = "verbs";

    private static final byte OP_USER = 0;
    private static final byte OP_HELLO = 1;
    private static final byte OP_DIAGNOSE = 2;
    private static final byte OP_ADMIT = 3;
    private static final byte OP_KEEPALIVE = 4;
    /** In an admit message: the requester's device sends a proof in rdma_cm private data when given a nonce. */
    private static final byte ADMIT_PROVES = 1;

    private final RdmaShuffleConf conf;
    private final ControlHandler userHandler;
    private final QueuePairParameters queuePairs;
    /** The most READs any channel keeps outstanding; each queue pair's send queue holds this many. */
    private final int credits;
    private final String device;
    private final VerbsDevice verbs;
    /** Which API reaches rdma-core, and why it was chosen. */
    private final String api;
    private final int rdmaPort;
    private final TcpNode control;
    private final NodeAddress address;
    private final ScheduledExecutorService timer;
    private final ExecutorService worker;
    private final Map<Integer, VerbsRegion> regions = new ConcurrentHashMap<>();
    private final PeerChannels<VerbsChannel> channels = new PeerChannels<>(this::ensureOpen, VerbsChannel::close);
    private final Set<VerbsChannel> waitingForRoom = ConcurrentHashMap.newKeySet();
    private final AtomicInteger completionRoom;
    private final AtomicLong registeredBytes = new AtomicLong();
    private final LongAdder readsCompleted = new LongAdder();
    private final LongAdder readsFailed = new LongAdder();
    private final LongAdder bytesRead = new LongAdder();
    private final LongAdder readsPosted = new LongAdder();
    private final LongAdder channelsOpened = new LongAdder();
    private final LongAdder reconnects = new LongAdder();
    /** Peers this node has opened a channel to (bounded by the cluster's executors). */
    private final Set<NodeAddress> peersSeen = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;
    /**
     * With authentication on: queue pairs announced over the authenticated control connection and not
     * yet connected (nonces for proofs, or source addresses); null with it off.
     */
    private final QueuePairAdmissions admissions;
    private final boolean authenticated;
    private final byte[] secret;
    /** Queue pairs peers have connected (or are connecting) to this node: caps and liveness. */
    private final AcceptedQueuePairs accepted;
    /** Tags of the queue pairs this node's channels post on ({@link WorkRequestIds}); 0 is never one. */
    private final AtomicInteger queuePairTags = new AtomicInteger();
    private final LongAdder queuePairsReaped = new LongAdder();
    private final Object refusalLogLock = new Object();
    private final org.rdmashuffle.transport.RateLimitedLog capLog =
            new org.rdmashuffle.transport.RateLimitedLog(LOG, 10_000);
    /** Whether the device is iWARP, whose READ sinks must be remote-writable. */
    private final boolean iwarp;
    /** The address this node's rdma_cm listens on, and its queue pairs connect from. */
    private final InetAddress rdmaAddress;
    private final Set<InetAddress> refusedFrom = ConcurrentHashMap.newKeySet();
    private final LongAdder queuePairsRefused = new LongAdder();
    private final KeptRegions kept = new KeptRegions();

    public VerbsNode(RdmaShuffleConf conf, NodeOptions options) throws IOException {
        this(conf, options, VerbsApis.choose(conf.verbsApi()));
    }

    /** With the device reached through {@code choice} (tests: a device emulated in the JVM). */
    VerbsNode(RdmaShuffleConf conf, NodeOptions options, VerbsApis.Choice choice) throws IOException {
        if (options.usesRealms()) {
            throw new IllegalArgumentException("verbs: " + NodeOptions.REALMS_ON_TCP_ONLY);
        }
        this.conf = conf;
        this.userHandler = options.controlHandler();
        this.admissions = options.secret() == null ? null : new QueuePairAdmissions(options.secret());
        this.authenticated = options.secret() != null;
        this.secret = options.secret() == null ? null : options.secret().clone();
        this.accepted = new AcceptedQueuePairs(conf.maxConnections(), conf.maxConnectionsPerAddress());
        this.queuePairs = QueuePairParameters.of(conf);
        if (queuePairs.readDepth() < conf.verbsMaxQpReadAtoms()) {
            LOG.info("verbs: spark.shuffle.rdma.verbs.maxQpReadAtoms={} lowered to {}, the most rdma_cm carries",
                    conf.verbsMaxQpReadAtoms(), queuePairs.readDepth());
        }
        this.credits = queuePairs.maxReadWindow(conf.maxReadsInFlightPerPeer());
        this.completionRoom = new AtomicInteger(conf.verbsCompletionQueueSize());
        InetSocketAddress bind = new InetSocketAddress(options.bindHost(), 0);
        if (bind.isUnresolved()) {
            throw new TransportException("verbs: cannot resolve bind host " + options.bindHost());
        }
        this.timer = Executors.newSingleThreadScheduledExecutor(daemon("rdma-verbs-timer"));
        this.worker = Executors.newCachedThreadPool(daemon("rdma-verbs-worker"));
        VerbsDevice d = null;
        TcpNode c = null;
        try {
            d = choice.factory().open(this, bind, queuePairs, credits, conf.verbsCompletionQueueSize(),
                    conf.verbsEventTimeoutMs());
            this.verbs = d;
            this.api = d.api() + " (" + choice.why() + ")";
            this.device = d.name();
            this.iwarp = isIwarp(device);
            this.rdmaPort = d.port();
            this.rdmaAddress = d.address();
            c = new TcpNode(conf, options.withControlHandler(this::onControl));
            this.control = c;
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
        int port = control.localAddress().port();
        this.address = new NodeAddress(options.advertisedHost(), port, PROVIDER);
        long tick = Math.max(10, Math.min(Math.min(Math.min(1000, conf.requestTimeoutMs() / 4),
                conf.verbsStallCheckMs() / 2), conf.idleTimeoutMs() / 6));
        timer.scheduleWithFixedDelay(this::checkTimeouts, tick, tick, TimeUnit.MILLISECONDS);
        LOG.info("verbs node listening on {} ({} through {}, rdma_cm port {}, at most {} READs in flight per channel, "
                + "completion queue {}, retry_count {}, rnr_retry_count {})", address, device, api, rdmaPort, credits,
                conf.verbsCompletionQueueSize(), queuePairs.retryCount(), queuePairs.rnrRetryCount());
    }

    /**
     * Whether {@code device} is an iWARP RNIC ({@code node_type} 4 in sysfs); true when that cannot be
     * read, since a remote-writable sink works on every device while a local-only one fails on iWARP.
     */
    private static boolean isIwarp(String device) {
        try {
            String type = Files.readString(Path.of("/sys/class/infiniband", device, "node_type")).trim();
            return type.startsWith("4");
        } catch (IOException | RuntimeException e) {
            LOG.info("verbs: cannot read the node type of {} ({}); registering READ sinks remote-writable, as "
                    + "iWARP needs", device, e.toString());
            return true;
        }
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

    // ---- control messages ----

    private ByteBuffer onControl(ByteBuffer request) throws Exception {
        if (!request.hasRemaining()) {
            throw new IllegalArgumentException("empty verbs control message");
        }
        if (closed) {
            throw new IllegalStateException("node is closing"); // a diagnosis now would blame the READ, not the peer
        }
        byte op = request.get();
        switch (op) {
            case OP_USER:
                return userHandler.onMessage(null, request.slice()); // verbs serves no realms
            case OP_HELLO:
                return ByteBuffer.allocate(8).putInt(0, rdmaPort).putInt(4, queuePairs.readDepth());
            case OP_ADMIT: {
                boolean proves = request.get() == ADMIT_PROVES;
                byte[] ip = new byte[request.remaining()];
                request.get(ip);
                byte[] nonce = admit(InetAddress.getByAddress(ip), proves);
                return nonce == null ? null : ByteBuffer.wrap(nonce);
            }
            case OP_KEEPALIVE: {
                int port = request.getShort() & 0xFFFF;
                byte[] ip = new byte[request.remaining()];
                request.get(ip);
                accepted.touch(new InetSocketAddress(InetAddress.getByAddress(ip), port), System.nanoTime());
                return null;
            }
            case OP_DIAGNOSE: {
                int rkey = request.getInt();
                long addr = request.getLong();
                int len = request.getInt();
                VerbsRegion r = regions.get(rkey);
                int status = r == null ? ReadStatus.UNKNOWN_KEY : r.check(addr, len);
                return ByteBuffer.allocate(1).put(0, (byte) status);
            }
            default:
                throw new IllegalArgumentException("unknown verbs control message " + op);
        }
    }

    private NodeAddress controlAddress(NodeAddress peer) {
        return new NodeAddress(peer.host(), peer.port(), TcpNode.PROVIDER);
    }

    private ByteBuffer controlCall(NodeAddress peer, ByteBuffer message) throws IOException {
        RdmaChannel ch = control.connect(controlAddress(peer));
        try {
            return ch.call(message).get(conf.requestTimeoutMs(), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            throw c instanceof IOException io ? io : new TransportException(String.valueOf(c), c);
        } catch (TimeoutException e) {
            throw new TransportException("no reply from " + peer + " within spark.shuffle.rdma.requestTimeout",
                    ReadStatus.TIMEOUT, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException("interrupted waiting for " + peer, e);
        }
    }

    CompletableFuture<ByteBuffer> userCall(NodeAddress peer, ByteBuffer request) {
        ByteBuffer m = ByteBuffer.allocate(1 + request.remaining());
        m.put(OP_USER).put(request.duplicate()).flip();
        try {
            return control.connect(controlAddress(peer)).call(m);
        } catch (TransportException e) {
            return CompletableFuture.failedFuture(e);
        }
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

    /** Asks {@code peer} what a READ of {@code len} bytes at {@code addr} under {@code rkey} would get. */
    private int askPeer(NodeAddress peer, int rkey, long addr, int len) throws IOException {
        ByteBuffer m = ByteBuffer.allocate(17).put(OP_DIAGNOSE).putInt(rkey).putLong(addr).putInt(len).flip();
        ByteBuffer reply = controlCall(peer, m);
        if (reply.remaining() != 1) {
            throw new TransportException("malformed diagnosis from " + peer, ReadStatus.PROTOCOL_ERROR, null);
        }
        return reply.get(reply.position()) & 0xFF;
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
        return channels.get(peer, waitMs, this::open);
    }

    private VerbsChannel open(NodeAddress peer) throws TransportException {
        ByteBuffer hello;
        try {
            hello = controlCall(peer, ByteBuffer.wrap(new byte[] {OP_HELLO}));
        } catch (IOException e) {
            throw new TransportException("cannot connect to " + peer + ": " + e.getMessage(), ReadStatus.CONNECTION_LOST,
                    e);
        }
        if (hello.remaining() < 8) {
            throw new TransportException("cannot connect to " + peer + ": its control reply is not a verbs hello "
                    + "(is it a tcp node?)", ReadStatus.PROTOCOL_ERROR, null);
        }
        int port = hello.getInt(hello.position());
        int peerReadDepth = hello.getInt(hello.position() + 4);
        int window;
        try {
            window = queuePairs.readWindow(conf.maxReadsInFlightPerPeer(), peerReadDepth);
        } catch (IllegalArgumentException e) {
            throw new TransportException("cannot connect to " + peer + ": " + e.getMessage(), ReadStatus.PROTOCOL_ERROR,
                    e);
        }
        String connection = queuePairs.describe(conf.maxReadsInFlightPerPeer(), peerReadDepth, verbs.depths());
        InetSocketAddress target = new InetSocketAddress(peer.host(), port);
        int attempts = conf.connectRetries() + 1;
        IOException last = null;
        for (int a = 1; a <= attempts; a++) {
            ensureOpen();
            VerbsChannel ch = new VerbsChannel(this, peer, target, window,
                    conf.requestTimeoutMs(), conf.verbsStallCheckMs(), connection);
            try {
                ch.start(conf.connectTimeoutMs());
                LOG.info("queue pair to {} ({} on {}): {}", peer, target, device, connection);
                channelsOpened.increment();
                if (!peersSeen.add(peer)) {
                    reconnects.increment();
                }
                return ch;
            } catch (IOException e) {
                last = e;
                LOG.debug("rdma_cm connect attempt {}/{} to {} failed: {}", a, attempts, target, e.toString());
                if (a < attempts) {
                    try {
                        Thread.sleep(conf.connectRetryWaitMs());
                    } catch (InterruptedException ie) {
                        Thread.currentThread().interrupt();
                        throw new TransportException("interrupted while connecting to " + peer, ie);
                    }
                }
            }
        }
        throw new TransportException("cannot connect to " + peer + " (rdma_cm " + target + ") after " + attempts
                + " attempt(s): " + (last == null ? "?" : last.getMessage()), ReadStatus.CONNECTION_LOST, last);
    }

    /**
     * A connected client queue pair to {@code target}, {@code peer}'s rdma_cm listener. With
     * authentication on, the queue pair is first announced to the peer over the authenticated control
     * connection (from this node's RDMA address), since rdma_cm's own connect request proves nothing;
     * where both devices carry rdma_cm private data the peer answers with a nonce, and the connect request
     * carries the proof of the secret over it ({@link QueuePairAdmissions}).
     */
    QueuePair openEndpoint(NodeAddress peer, InetSocketAddress target, long timeoutMs) throws IOException {
        byte[] privateData = announce(peer);
        return verbs.connect(target, timeoutMs, privateData);
    }

    /**
     * With authentication on, announces one queue pair to {@code peer} over the authenticated control
     * connection.
     *
     * @return what its connect request must carry (the proof over the peer's nonce), or null
     */
    byte[] announce(NodeAddress peer) throws IOException {
        ensureOpen();
        if (!authenticated) {
            return null;
        }
        byte[] ip = rdmaAddress.getAddress();
        ByteBuffer reply = controlCall(peer, ByteBuffer.allocate(2 + ip.length).put(OP_ADMIT)
                .put(verbs.carriesProof() ? ADMIT_PROVES : 0).put(ip).flip());
        if (reply == null || reply.remaining() != QueuePairAdmissions.NONCE_BYTES) {
            return null;
        }
        byte[] nonce = new byte[QueuePairAdmissions.NONCE_BYTES];
        reply.duplicate().get(nonce);
        return QueuePairAdmissions.proof(secret, nonce, rdmaAddress);
    }

    /** A queue pair to {@code target} whose connect request carries {@code privateData} (tests: after {@link #announce}). */
    QueuePair connectAnnounced(InetSocketAddress target, long timeoutMs, byte[] privateData) throws IOException {
        ensureOpen();
        return verbs.connect(target, timeoutMs, privateData);
    }

    /**
     * Records one announced queue pair from {@code from}, valid for twice the connect timeout: a nonce when
     * the requester proves and this node's device reads proofs, else an admission of the address.
     *
     * @return the nonce, or null
     */
    private byte[] admit(InetAddress from, boolean proves) {
        long now = System.nanoTime();
        long deadline = now + TimeUnit.MILLISECONDS.toNanos(2 * conf.connectTimeoutMs() + 5_000);
        if (admissions == null) {
            return null; // authentication is off here: every queue pair is admitted (within the caps)
        }
        if (proves && verbs.carriesProof()) {
            byte[] nonce = admissions.issueNonce(from, deadline, now);
            if (nonce == null) {
                throw new IllegalStateException("too many queue pair admissions pending");
            }
            return nonce;
        }
        if (!admissions.admitAddress(from, deadline, now)) {
            throw new IllegalStateException("too many queue pair admissions pending");
        }
        return null;
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
        if (from == null || from.getAddress() == null) {
            queuePairsRefused.increment();
            return null;
        }
        long now = System.nanoTime();
        InetAddress ip = from.getAddress();
        AcceptedQueuePairs.Admission a = accepted.admit(from,
                () -> !authenticated || admissions.admit(ip, privateData, now), now);
        if (a.entry() != null) {
            return a.entry();
        }
        queuePairsRefused.increment();
        if (a.refusal() == AcceptedQueuePairs.Refusal.NOT_AUTHORISED) {
            if (refusedFrom.size() < 1024 && refusedFrom.add(ip)) { // bounded: sources can be spoofed
                LOG.warn("verbs: refused a queue pair from {}: {}; later refusals from there are logged at DEBUG", ip,
                        a.refusal().why);
            } else {
                LOG.debug("verbs: refused a queue pair from {}: {}", ip, a.refusal().why);
            }
        } else {
            synchronized (refusalLogLock) {
                capLog.warn("verbs: refused a queue pair from {}: {} ({} held, {} from there)", ip, a.refusal().why,
                        accepted.size(), accepted.from(ip));
            }
        }
        return null;
    }

    /** Queue pairs accepted now (connecting or connected), for tests and diagnosis. */
    int acceptedQueuePairs() {
        return accepted.size();
    }

    /** Accepted queue pairs closed because no keep-alive named them for spark.shuffle.rdma.idleTimeout. */
    long queuePairsReaped() {
        return queuePairsReaped.sum();
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

    /**
     * Tells {@code peer} that the queue pair at {@code qp} (this node's end) is alive, off the caller's
     * thread; {@code c} hears whether it answered.
     */
    void sendKeepAlive(VerbsChannel c, NodeAddress peer, InetSocketAddress qp) {
        if (qp == null || qp.getAddress() == null) {
            return;
        }
        byte[] ip = qp.getAddress().getAddress();
        ByteBuffer m = ByteBuffer.allocate(3 + ip.length).put(OP_KEEPALIVE).putShort((short) qp.getPort()).put(ip)
                .flip();
        execute(() -> {
            try {
                controlCall(peer, m);
                c.keepAliveAnswered(true, null);
            } catch (IOException | RuntimeException e) {
                c.keepAliveAnswered(false, e.getMessage());
            }
        });
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
        return queuePairsRefused.sum();
    }

    /** An accept that was ended because its connection never came (logged at DEBUG: peers can cause it). */
    void noteAbortedAccept(String why) {
        LOG.debug("verbs: gave up accepting a queue pair: {}", why);
    }

    long connectTimeoutMs() {
        return conf.connectTimeoutMs();
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

    private volatile Throwable failure;

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

    /** Which API reaches rdma-core ({@code java.lang.foreign} or {@code DiSNI}) and why it was chosen. */
    public String api() {
        return api;
    }

    void channelClosed(VerbsChannel c) {
        channels.remove(c);
        waitingForRoom.remove(c);
    }

    // ---- completions ----

    int takeCompletionRoom(int want) {
        for (;;) {
            int r = completionRoom.get();
            if (r <= 0) {
                return 0;
            }
            int k = Math.min(r, want);
            if (completionRoom.compareAndSet(r, r - k)) {
                return k;
            }
        }
    }

    void returnCompletionRoom(int n) {
        if (n <= 0) {
            return;
        }
        completionRoom.addAndGet(n);
        if (!waitingForRoom.isEmpty()) {
            for (VerbsChannel c : waitingForRoom) {
                if (waitingForRoom.remove(c)) {
                    execute(c::roomAvailable);
                }
            }
        }
    }

    void waitingForRoom(VerbsChannel c) {
        waitingForRoom.add(c);
        if (completionRoom.get() > 0 && waitingForRoom.remove(c)) {
            execute(c::roomAvailable);
        }
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
        for (Runnable close : accepted.idle(now, idleNanos)) {
            queuePairsReaped.increment();
            synchronized (refusalLogLock) {
                capLog.warn("verbs: closed a queue pair no keep-alive named for spark.shuffle.rdma.idleTimeout ({} ms): "
                        + "its peer went away without a word", conf.idleTimeoutMs());
            }
            execute(close);
        }
    }

    void logClose(QueuePair ep, Exception e) {
        LOG.debug("closing endpoint {} failed", ep, e);
    }

    // ---- memory ----

    /** {@inheritDoc} A verbs node serves no realms (it has no secrets per realm): {@code realm} changes nothing. */
    @Override
    public MemoryRegion register(ByteBuffer directBuffer, RegionAccess access, String realm) throws IOException {
        if (realm != null) {
            Realms.requireValid(realm);
        }
        if (!directBuffer.isDirect()) {
            throw new IllegalArgumentException("only direct buffers can be registered");
        }
        return add(directBuffer.duplicate().clear(), access, false);
    }

    /**
     * Registers a byte range of a file for remote READ. Devices that pin through the kernel's common
     * path register a read-only shared mapping. Software devices (siw, rxe) pin every page for writing
     * and refuse read-only mappings; then the file is mapped read-write (never written), and where it
     * cannot be opened for writing its bytes are copied into registered memory. Each step down is logged
     * once per node. A verbs node serves no realms: {@code realm} changes nothing.
     */
    @Override
    public MemoryRegion registerFile(Path file, long offset, int length, String realm) throws IOException {
        if (realm != null) {
            Realms.requireValid(realm);
        }
        for (;;) {
            FileMemory mode = fileMode;
            ByteBuffer memory = null;
            try {
                memory = Mappings.fileRange(file, offset, length, mode);
                return add(memory, RegionAccess.REMOTE_READ, true);
            } catch (TransportException e) {
                if (memory != null) {
                    Mappings.unmap(memory);
                }
                if (mode == FileMemory.COPY || closed) {
                    throw e;
                }
                stepDown(mode, e.getMessage());
            } catch (IOException e) {
                if (memory != null) {
                    Mappings.unmap(memory);
                }
                if (mode != FileMemory.READ_WRITE) {
                    throw e;
                }
                stepDown(mode, "cannot open " + file + " for a read-write mapping: " + e.getMessage());
            } catch (RuntimeException e) {
                if (memory != null) {
                    Mappings.unmap(memory);
                }
                throw e;
            }
        }
    }

    private volatile FileMemory fileMode = FileMemory.READ_ONLY;

    private synchronized void stepDown(FileMemory from, String why) {
        if (fileMode != from) {
            return;
        }
        fileMode = FileMemory.values()[from.ordinal() + 1];
        LOG.info("verbs: the device did not register a {} ({}); registering map outputs as {} from now on",
                from == FileMemory.READ_ONLY ? "read-only file mapping" : "read-write file mapping", why,
                from == FileMemory.READ_ONLY ? "read-write mappings (never written)" : "copies in registered memory");
    }


    private VerbsRegion add(ByteBuffer memory, RegionAccess access, boolean ownsMapping) throws IOException {
        ensureOpen();
        // Served memory: REMOTE_READ only (a read-only file mapping cannot be registered writable). READ
        // sinks: LOCAL_WRITE, and on iWARP also REMOTE_WRITE, which iWARP requires of the buffer a READ
        // response lands in (RoCE and InfiniBand do not: there a sink cannot be written by any peer).
        int flags = access == RegionAccess.REMOTE_READ ? VerbsDevice.ACCESS_REMOTE_READ
                : iwarp ? VerbsDevice.ACCESS_LOCAL_WRITE | VerbsDevice.ACCESS_REMOTE_WRITE : VerbsDevice.ACCESS_LOCAL_WRITE;
        VerbsDevice.Memory mr = verbs.register(memory, flags);
        VerbsRegion r = new VerbsRegion(this, mr, memory, access, ownsMapping);
        regions.put(r.rkey, r);
        registeredBytes.addAndGet(r.length);
        if (closed) {
            r.close();
            ensureOpen();
        }
        return r;
    }

    void deregistered(VerbsRegion r) {
        regions.remove(r.rkey, r);
        registeredBytes.addAndGet(-r.length);
    }

    /** {@code r}'s deregistration failed: it is kept for good, and this node fails (to the engine's path). */
    void deregistrationFailed(VerbsRegion r, Exception why) {
        kept.keep(r, why, address);
        deviceFailed("deregistering a region failed (" + why.getMessage() + "); its memory is kept");
    }

    @Override
    public Registrar sinkRegistrar() {
        return memory -> {
            if (closed) { // not the host refusing memory (an IOException to the pool): the node is gone
                throw new IllegalStateException("node " + address + " is closed");
            }
            return register(memory, RegionAccess.READ_SINK);
        };
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
        return new NodeStats(readsCompleted.sum(), readsFailed.sum(), bytesRead.sum(), 0, 0, 0, regions.size(),
                registeredBytes.get(), open, readsPosted.sum(), channelsOpened.sum(), reconnects.sum(),
                queuePairsRefused.sum() + control.stats().connectionsRefused(), KeptRegions.count());
    }

    private void ensureOpen() throws TransportException {
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
        for (VerbsRegion r : regions.values().toArray(new VerbsRegion[0])) {
            r.close();
        }
        worker.shutdown();
        try {
            if (!worker.awaitTermination(5, TimeUnit.SECONDS)) {
                worker.shutdownNow();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        verbs.close(); // joins the device's threads, each within spark.shuffle.rdma.verbs.eventTimeout
        control.close();
        LOG.info("verbs node {} closed: {} READs completed ({} bytes), {} failed", address, readsCompleted.sum(),
                bytesRead.sum(), readsFailed.sum());
    }

}
