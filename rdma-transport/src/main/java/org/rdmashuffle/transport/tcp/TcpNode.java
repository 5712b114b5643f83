package org.rdmashuffle.transport.tcp;

import java.io.IOException;
import java.net.BindException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.Registrar;
import org.rdmashuffle.transport.HandshakeRefusedException;
import org.rdmashuffle.transport.HandshakeRefusedException.Reason;
import org.rdmashuffle.transport.Mappings;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.NodeStats;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.PeerBusyException;
import org.rdmashuffle.transport.PeerChannels;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.Realms;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.SinkRegistrar;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A node of the tcp provider: one-sided READ emulated over TCP. It owns a listening socket and its
 * responder thread (serving peers from the registration table), a requester thread (driving the
 * channels it opened), and the table. rkeys look random and never repeat in a node's life (the first 2^32
 * registrations; after that, never shared by two live regions), so a stale rkey fails once its region is
 * deregistered and never names a later region. Addresses are virtual: each region gets its own base.
 *
 * <p>With secrets per realm ({@link NodeOptions#secrets()}) the node serves many jobs, each with its own
 * secret: a connection READs only the regions registered for the realm it authenticated for. Its own
 * connections name {@link NodeOptions#realm()}, when set, and prove {@link NodeOptions#secret()}.
 */
public final class TcpNode implements RdmaNode {
    private static final Logger LOG = LoggerFactory.getLogger(TcpNode.class);
    public static final String PROVIDER = "tcp";

    private final RdmaShuffleConf conf;
    /** The keys this node's messages name, as its configuration was read. */
    final KeyNames keys;
    private final NodeOptions options;
    /** The UTF-8 bytes of the realm this node's connections name, or null. */
    private final byte[] realm;
    private final ServerSocketChannel server;
    private final NodeAddress address;
    private final RegionTable table = new RegionTable();
    private final TcpResponder responder;
    private final TcpRequester requester;
    private final Thread responderThread;
    private final Thread requesterThread;
    /** The pause watcher runs while this node is open: its timeouts count running time ({@link Pauses}). */
    private final Pauses.Lease pauseWatch;
    private final PeerChannels<TcpChannel> channels =
            new PeerChannels<>(this::ensureOpen, c -> c.fail(ReadStatus.CHANNEL_CLOSED, "node closed"));
    private final AtomicLong nextBase = new AtomicLong(1);
    /** rkeys: the registration's number through a bijection of ints keyed at random per node (see nextKey). */
    private final int keyMultiplier;
    private final int keyOffset;
    /** Registrations so far; under this. */
    private int keySequence;
    private final AtomicLong registeredBytes = new AtomicLong();
    private volatile boolean closed;
    private volatile Throwable failure;

    // Written by the requester thread only.
    private volatile long readsCompleted;
    private volatile long readsFailed;
    private volatile long bytesRead;
    private final java.util.concurrent.atomic.LongAdder readsPosted = new java.util.concurrent.atomic.LongAdder();
    private final java.util.concurrent.atomic.LongAdder channelsOpened = new java.util.concurrent.atomic.LongAdder();
    private final java.util.concurrent.atomic.LongAdder reconnects = new java.util.concurrent.atomic.LongAdder();
    /** Peers this node has opened a channel to (bounded by the cluster's executors). */
    private final java.util.Set<NodeAddress> peersSeen = java.util.concurrent.ConcurrentHashMap.newKeySet();

    public TcpNode(RdmaShuffleConf conf, NodeOptions options) throws IOException {
        this.conf = conf;
        this.keys = new KeyNames(conf);
        this.options = options;
        java.security.SecureRandom keys = new java.security.SecureRandom();
        this.keyMultiplier = keys.nextInt() | 1;
        this.keyOffset = keys.nextInt();
        this.realm = options.realm() == null ? null : Realms.requireValid(options.realm());
        this.server = bind(options.bindHost(), conf.port(), conf.portMaxRetries(), this.keys);
        int port = ((InetSocketAddress) server.getLocalAddress()).getPort();
        this.address = new NodeAddress(options.advertisedHost(), port, PROVIDER);
        try {
            this.responder = new TcpResponder(this, server, table, options.controlHandler(), options.secret(),
                    options.secrets(), TcpResponder.Limits.from(conf, this.keys));
            this.requester = new TcpRequester(this);
        } catch (IOException | RuntimeException e) {
            server.close();
            throw e;
        }
        this.responderThread = new Thread(responder, "rdma-tcp-responder-" + port);
        this.responderThread.setDaemon(true);
        this.requesterThread = new Thread(requester, "rdma-tcp-requester-" + port);
        this.requesterThread.setDaemon(true);
        responderThread.start();
        requesterThread.start();
        this.pauseWatch = Pauses.watch();
        LOG.info("tcp node listening on {}", address);
    }

    private static ServerSocketChannel bind(String host, int port, int retries, KeyNames keys) throws IOException {
        int attempts = port == 0 ? 1 : retries + 1;
        BindException last = null;
        for (int a = 0; a < attempts && port + a <= 65535; a++) {
            ServerSocketChannel s = ServerSocketChannel.open();
            try {
                s.socket().setReuseAddress(true);
                s.bind(new InetSocketAddress(host, port == 0 ? 0 : port + a), 256);
                return s;
            } catch (BindException e) {
                s.close();
                last = e;
            } catch (IOException | RuntimeException e) {
                s.close();
                throw new TransportException("cannot listen on " + host + ":" + port + ": " + e.getMessage(), e);
            }
        }
        throw new TransportException("cannot listen on " + host + " ports " + port + ".." + (port + attempts - 1)
                + " (all taken; see " + keys.port + " and " + keys.portMaxRetries + ")", last);
    }

    /** The ToS byte for this node's sockets ({@code spark.shuffle.rdma.verbs.tos}), or -1 for the kernel's. */
    int ipTos() {
        return conf.verbsTos();
    }

    /** Sets {@code tos} as the socket's IP_TOS unless it is negative (the kernel's default stays). */
    static void applyTos(SocketChannel sc, int tos) throws IOException {
        if (tos >= 0) {
            sc.setOption(java.net.StandardSocketOptions.IP_TOS, tos);
        }
    }

    @Override
    public NodeAddress localAddress() {
        return address;
    }

    TcpRequester requester() {
        return requester;
    }

    @Override
    public RdmaChannel connect(NodeAddress peer) throws TransportException {
        if (!PROVIDER.equals(peer.provider())) {
            throw new TransportException("cannot reach " + peer + " from a tcp node: providers differ");
        }
        long waitMs = (conf.connectTimeoutMs() + conf.connectRetryWaitMs()) * (conf.connectRetries() + 1) + 1000;
        return channels.get(peer, waitMs, this::connectWithRetries);
    }

    private TcpChannel connectWithRetries(NodeAddress peer) throws TransportException {
        int attempts = conf.connectRetries() + 1;
        IOException last = null;
        for (int a = 1; a <= attempts; a++) {
            ensureOpen();
            try {
                return openChannel(peer);
            } catch (HandshakeRefused e) {
                throw new HandshakeRefusedException("connection to " + peer + " refused at handshake: "
                        + e.getMessage(), e.reason, e);
            } catch (IOException e) {
                last = e;
                LOG.debug("connect attempt {}/{} to {} failed: {}", a, attempts, peer, e.toString());
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
        String why = "cannot connect to " + peer + " after " + attempts + " attempt(s) of " + conf.connectTimeoutMs()
                + " ms: " + (last == null ? "?" : last.getMessage());
        if (last instanceof Busy) {
            throw new PeerBusyException(why, last); // the last answer was busy: worth trying again later
        }
        throw new TransportException(why, ReadStatus.CONNECTION_LOST, last);
    }

    private TcpChannel openChannel(NodeAddress peer) throws IOException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(conf.connectTimeoutMs());
        SocketChannel sc = SocketChannel.open();
        try (Selector sel = Selector.open()) {
            sc.configureBlocking(false);
            sc.socket().setTcpNoDelay(true);
            applyTos(sc, ipTos());
            if (!conf.bindAddress().isBlank()) {
                // Leave from the bound address, so the route (and the interface) is the one the user chose.
                sc.bind(new InetSocketAddress(options.bindHost(), 0));
            }
            InetSocketAddress target = peer.socketAddress();
            if (target.isUnresolved()) {
                throw new IOException("cannot resolve host " + peer.host());
            }
            if (!sc.connect(target)) {
                SelectionKey k = sc.register(sel, SelectionKey.OP_CONNECT);
                while (!sc.finishConnect()) {
                    waitFor(sel, deadline, "connect");
                }
                k.cancel();
                sel.selectNow();
            }
            byte[] secret = options.secret();
            String realmName = options.realm();
            byte[] clientNonce = Handshake.nonce();
            // With a secret, the proofs name the peer's address as dialled (the socket's, after any resolution), so a
            // process that relays this handshake to another node gets a proof that node refuses. Without one,
            // nothing is proved: the HELLO is version 2's, byte for byte.
            InetSocketAddress dialled = (InetSocketAddress) sc.getRemoteAddress();
            byte[] address = secret == null ? null : Handshake.addressField(dialled);
            ByteBuffer hello = ByteBuffer.allocate(Wire.HELLO_BYTES + (realm == null ? 0 : 1 + realm.length)
                    + (address == null ? 0 : address.length));
            int flags = (secret != null ? Wire.FLAG_AUTH | Wire.FLAG_ADDRESS : 0)
                    | (realm != null ? Wire.FLAG_REALM : 0);
            hello.putInt(Wire.MAGIC).putShort(secret == null ? Wire.VERSION_WITHOUT_REALM : Wire.VERSION)
                    .putShort((short) flags).put(clientNonce);
            if (realm != null) {
                hello.put((byte) realm.length).put(realm);
            }
            if (address != null) {
                hello.put(address);
            }
            exchange(sc, sel, hello.flip(), deadline);
            ByteBuffer challenge = ByteBuffer.allocate(Wire.CHALLENGE_BYTES);
            receive(sc, sel, challenge, deadline);
            if (challenge.getInt() != Wire.MAGIC) {
                throw new HandshakeRefused("peer is not an rdma-shuffle tcp node", Reason.NOT_RDMA_SHUFFLE);
            }
            challenge.getShort();
            int status = challenge.getShort();
            if (status == Wire.HS_BUSY) {
                throw new Busy(keys.busy); // worth a retry
            }
            if (status == Wire.HS_OTHER_ADDRESS) {
                throw new HandshakeRefused("this node dialled " + dialled + ", and " + Wire.handshakeStatus(status),
                        Reason.OTHER_ADDRESS);
            }
            if (status != Wire.HS_OK) {
                throw new HandshakeRefused(Wire.handshakeStatus(status, realmName, keys), Wire.reason(status));
            }
            byte[] serverNonce = new byte[Wire.NONCE_BYTES];
            challenge.get(serverNonce);
            ByteBuffer auth = ByteBuffer.wrap(Handshake.proof(secret, 'c', serverNonce, clientNonce, address, realm));
            exchange(sc, sel, auth, deadline);
            ByteBuffer welcome = ByteBuffer.allocate(Wire.WELCOME_BYTES);
            receive(sc, sel, welcome, deadline);
            status = welcome.getInt();
            if (status == Wire.HS_BUSY) {
                // past the peer's maxConnections (it found no silent connection to close for this one), or this
                // realm holds its share of the peer's connections
                throw new Busy(keys.busy); // worth a retry
            }
            if (status != Wire.HS_OK) {
                throw new HandshakeRefused(Wire.handshakeStatus(status, realmName, keys), Wire.reason(status));
            }
            if (secret != null
                    && !Handshake.verify(Handshake.proof(secret, 's', clientNonce, serverNonce, address, realm),
                            welcome)) {
                String at = " for the address this node dialled (" + dialled + ")";
                throw new HandshakeRefused((realmName == null ? "the peer could not prove it holds the shared secret"
                        : "the peer could not prove it holds the secret of realm " + Realms.printable(realmName)) + at,
                        Reason.PEER_UNPROVEN);
            }
            for (SelectionKey k : sel.keys()) {
                k.cancel();
            }
            sel.selectNow();
        } catch (IOException | RuntimeException e) {
            sc.close();
            throw e;
        }
        TcpChannel c = new TcpChannel(this, peer, sc, conf.maxReadsInFlightPerPeer(), conf.sendQueueDepth(),
                conf.requestTimeoutMs(), conf.maxControlMessageSizeBytes(), conf.idleTimeoutMs());
        try {
            requester.add(c);
        } catch (IOException | RuntimeException e) {
            sc.close();
            throw e;
        }
        channelsOpened.increment();
        if (!peersSeen.add(peer)) {
            reconnects.increment();
        }
        return c;
    }

    private void waitFor(Selector sel, long deadline, String what) throws IOException {
        long leftMs = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
        if (leftMs <= 0) {
            throw new IOException(what + " timed out (" + keys.connectTimeout + ")");
        }
        sel.select(leftMs);
        sel.selectedKeys().clear();
    }

    private void exchange(SocketChannel sc, Selector sel, ByteBuffer b, long deadline) throws IOException {
        SelectionKey k = sc.keyFor(sel);
        k = k == null ? sc.register(sel, SelectionKey.OP_WRITE) : k;
        k.interestOps(SelectionKey.OP_WRITE);
        while (b.hasRemaining()) {
            if (sc.write(b) == 0) {
                waitFor(sel, deadline, "handshake");
            }
        }
    }

    private void receive(SocketChannel sc, Selector sel, ByteBuffer b, long deadline) throws IOException {
        SelectionKey k = sc.keyFor(sel);
        k = k == null ? sc.register(sel, SelectionKey.OP_READ) : k;
        k.interestOps(SelectionKey.OP_READ);
        while (b.hasRemaining()) {
            int n = sc.read(b);
            if (n < 0) {
                throw new IOException("peer closed the connection during the handshake");
            }
            if (n == 0) {
                waitFor(sel, deadline, "handshake");
            }
        }
        b.flip();
    }

    @Override
    public MemoryRegion register(ByteBuffer directBuffer, RegionAccess access, String realm) throws IOException {
        if (!directBuffer.isDirect()) {
            throw new IllegalArgumentException("only direct buffers can be registered");
        }
        if (realm != null) {
            Realms.requireValid(realm);
        }
        return add(directBuffer.duplicate().clear(), access, false, realm);
    }

    @Override
    public MemoryRegion registerFile(Path file, long offset, int length, String realm) throws IOException {
        if (realm != null) {
            Realms.requireValid(realm);
        }
        try (FileChannel fc = FileChannel.open(file, java.nio.file.StandardOpenOption.READ)) {
            return registerFile(fc, file.toString(), offset, length, realm);
        }
    }

    @Override
    public MemoryRegion registerFile(FileChannel file, String name, long offset, int length, String realm)
            throws IOException {
        if (realm != null) {
            Realms.requireValid(realm);
        }
        ByteBuffer mapped = Mappings.fileRange(file, name, offset, length, Mappings.FileMemory.READ_ONLY);
        try {
            return add(mapped, RegionAccess.REMOTE_READ, true, realm);
        } catch (IOException | RuntimeException e) {
            Mappings.unmap(mapped);
            throw e;
        }
    }

    private synchronized TcpRegion add(ByteBuffer memory, RegionAccess access, boolean ownsMapping, String realm)
            throws TransportException {
        ensureOpen();
        int rkey;
        do {
            rkey = nextKey();
        } while (rkey == 0 || table.contains(rkey)); // only after 2^32 registrations can a key come back
        long base = nextBase.getAndIncrement() << 32;
        TcpRegion r = new TcpRegion(this, rkey, base, memory, access, ownsMapping, realm);
        table.put(r);
        registeredBytes.addAndGet(r.length);
        return r;
    }

    /**
     * The next registration's key: its number, multiplied by an odd number and offset (both random per node), then
     * mixed (murmur3's finalizer). Each step is a bijection of ints, so 2^32 registrations get distinct keys, as
     * scattered as random ones; under this.
     */
    private int nextKey() {
        int h = ++keySequence * keyMultiplier + keyOffset;
        h ^= h >>> 16;
        h *= 0x85EBCA6B;
        h ^= h >>> 13;
        h *= 0xC2B2AE35;
        return h ^ (h >>> 16);
    }

    void deregistered(TcpRegion r) {
        table.remove(r.rkey);
        registeredBytes.addAndGet(-r.length);
    }

    @Override
    public Registrar sinkRegistrar() {
        return new SinkRegistrar(this, () -> closed);
    }

    /** {@code n} READs accepted by one of this node's channels. */
    void countPosted(int n) {
        readsPosted.add(n);
    }

    void countRead(int status, int len) {
        if (status == ReadStatus.SUCCESS) {
            readsCompleted++;
            bytesRead += len;
        } else {
            readsFailed++;
        }
    }

    /** {@code c} went unused for the idle timeout: later connects open a new channel (holders may still post to it). */
    void retired(TcpChannel c) {
        channels.remove(c);
    }

    void channelClosed(TcpChannel c) {
        channels.remove(c);
        requester.remove(c);
    }

    @Override
    public NodeStats stats() {
        int open = 0;
        for (TcpChannel c : requester.channels()) {
            if (c.isOpen()) {
                open++;
            }
        }
        return new NodeStats(readsCompleted, readsFailed, bytesRead, responder.readsServed, responder.readsRefused,
                responder.bytesServed, table.size(), registeredBytes.get(), open, readsPosted.sum(),
                channelsOpened.sum(), reconnects.sum(), responder.connectionsRefused, 0,
                responder.connectionsEvictedIdle);
    }

    /** Connections peers have open to this node (tests and operators: they go with their peers). */
    public int servedConnections() {
        return responder.connectionCount();
    }

    /** Connections refused at a limit since the node started. */
    long connectionsRefused() {
        return responder.connectionsRefused;
    }

    /** Of {@link #connectionsRefused()}: those refused because their source address held its cap. */
    long connectionsRefusedPerAddress() {
        return responder.connectionsRefusedPerAddress;
    }

    /** Connections closed for a limit (handshake, drain, frame or idle time) since the node started. */
    long connectionsClosedByLimit() {
        return responder.connectionsClosedByLimit;
    }

    /** Handshaken connections closed at {@code maxConnections} to admit a newcomer, having been silent longest. */
    long connectionsEvictedIdle() {
        return responder.connectionsEvictedIdle;
    }

    private void ensureOpen() throws TransportException {
        if (closed) {
            throw new TransportException("node " + address + " is closed", ReadStatus.CHANNEL_CLOSED, null);
        }
        Throwable f = failure;
        if (f != null) {
            throw new TransportException("node " + address + " has failed: " + f, ReadStatus.CHANNEL_CLOSED, f);
        }
    }

    @Override
    public Throwable failure() {
        return failure;
    }

    /** The responder's loop could not go on: the node serves nothing more (its thread closed every connection). */
    void responderFailed(Throwable t) {
        if (failure == null) {
            failure = t;
        }
    }

    /** The requester's loop could not go on: every channel has failed, and no new one opens. */
    void requesterFailed(Throwable t) {
        if (failure == null) {
            failure = t;
        }
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            requester.stop();
            join(requesterThread);
            for (TcpChannel c : requester.channels()) {
                c.fail(ReadStatus.CHANNEL_CLOSED, "node closed");
            }
            responder.stop();
            join(responderThread);
            if (!responderThread.isAlive()) {
                responder.releaseAll(); // idempotent: the loop's own release may have failed part-way
            }
            try {
                server.close();
            } catch (IOException e) {
                LOG.debug("closing server socket", e);
            }
            for (TcpRegion r : table.all()) {
                r.close();
            }
            LOG.info("tcp node {} closed", address);
        } finally {
            pauseWatch.close();
        }
    }

    private static void join(Thread t) {
        try {
            t.join(10_000);
            if (t.isAlive()) {
                LOG.warn("{} did not stop within 10 s", t.getName());
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** The peer answered the handshake with busy: worth a retry, and, once the retries are spent, a later try. */
    private static final class Busy extends IOException {
        private static final long serialVersionUID = 1L;

        Busy(String status) {
            super("refused at handshake: " + status);
        }
    }

    /** The peer answered the handshake with a refusal: retrying will not help. */
    private static final class HandshakeRefused extends IOException {
        private static final long serialVersionUID = 1L;
        final Reason reason;

        HandshakeRefused(String message, Reason reason) {
            super(message);
            this.reason = reason;
        }
    }
}
