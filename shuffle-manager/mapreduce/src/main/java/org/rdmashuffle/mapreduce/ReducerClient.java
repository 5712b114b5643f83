package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.DoubleSupplier;
import java.util.function.LongSupplier;
import org.apache.hadoop.mapreduce.task.reduce.MapHost;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.serve.MapOutputServer;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.HandshakeRefusedException;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.PeerBusyException;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A reduce task's side of the transport: its node (outgoing connections only, each proving the job's shuffle
 * secret for the job's realm), its pool of registered receive buffers, and which NodeManagers it fetches from
 * over HTTP instead — for good when what it says cannot change while the job runs (another protocol or version,
 * a relay), else for a while: a service that is busy ({@link PeerBusyException}), unreachable (not running,
 * restarting) or does not know the job (yet) is not given up on: that host's outputs go over HTTP for a while
 * ({@link #BUSY_FIRST_WAIT_MS}, doubling to {@link #BUSY_MAX_WAIT_MS} while it stays so), then READs are tried
 * again. Each said once per host in a WARN, each time it changes. Shared by the task's fetcher threads; each of
 * them has its own {@link BlockFetcher}.
 *
 * <p>Opened in this order: node, pool. Closed node first (its channels stop and complete their READs before the
 * buffers' memory goes), then the pool — as {@link org.rdmashuffle.shuffle.core.serve.MapOutputServer} does.
 */
final class ReducerClient implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(ReducerClient.class);

    private final RdmaShuffleConf conf;
    private final int servicePort;
    private final RdmaNode node;
    private final BufferPool pool;
    /** NodeManager (host name of its map outputs) → why its outputs are fetched over HTTP. */
    private final Map<String, String> viaHttp = new ConcurrentHashMap<>();
    /** The first wait after a service said busy, before READs from its host are tried again. */
    static final long BUSY_FIRST_WAIT_MS = 2_000;
    /** The longest wait: it doubles with every busy answer in a row, up to this. */
    static final long BUSY_MAX_WAIT_MS = 60_000;
    /**
     * Each wait is its nominal length (2 s, 4, 8, … 60) ± this fraction, at random, so that the reducers of every job
     * do not try a restarted NodeManager again all at the same moment.
     */
    static final double WAIT_JITTER = 0.25;

    /** Why a host's READs wait: its service said busy, or it could not be reached or did not know the job. */
    enum Later {
        /** At its connection or REGISTER limits ({@link PeerBusyException}; counted in SERVICE_BUSY). */
        BUSY,
        /**
         * Not reachable (connection refused or lost, no answer), or it did not know the job (a handshake refused for
         * an unknown job or wrong secret, a REGISTER answered "unknown job"): a service restarting (counted in
         * SERVICE_UNREACHABLE).
         */
        DOWN
    }

    /**
     * A NodeManager whose READs wait: its outputs go over HTTP until {@code untilNanos}, {@code jitteredMs} from
     * when it was said; {@code waitMs} the nominal wait, doubled by the next.
     */
    private record Wait(Later kind, long untilNanos, long waitMs, long jitteredMs, String why) {
    }

    /** NodeManager → its back-off; gone once its service answers a REGISTER. */
    private final Map<String, Wait> waits = new ConcurrentHashMap<>();
    /** NodeManager → the kind of wait last said in a WARN (one WARN per host per change); gone once answered. */
    private final Map<String, Later> said = new ConcurrentHashMap<>();
    private final LongSupplier nanoClock;
    /** Uniform in [0, 1): where in ±{@link #WAIT_JITTER} a wait falls. */
    private final DoubleSupplier jitter;

    ReducerClient(RdmaShuffleConf serviceConf, String realm, byte[] secret) throws IOException {
        this(serviceConf, realm, secret, System::nanoTime, () -> ThreadLocalRandom.current().nextDouble());
    }

    /**
     * With the clock the busy back-off is measured by ({@link System#nanoTime} but in tests) and the source of its
     * jitter (uniform in [0, 1); 0.5 waits the nominal wait).
     */
    ReducerClient(RdmaShuffleConf serviceConf, String realm, byte[] secret, LongSupplier nanoClock,
                  DoubleSupplier jitter) throws IOException {
        this.nanoClock = nanoClock;
        this.jitter = jitter;
        // The task's own node needs no fixed port: nobody connects to it.
        this.conf = serviceConf.with(Map.of(RdmaShuffleConf.PORT.name(), "0"));
        this.servicePort = serviceConf.port();
        // With a bind address, connections leave from it (the node listens there too, unused).
        String host = MapReduceRdmaConf.bindAddress(serviceConf).map(java.net.InetAddress::getHostAddress)
                .orElse("127.0.0.1");
        NodeOptions options = new NodeOptions(host, host, ControlHandler.NONE, null).withRealm(realm, secret);
        try {
            this.node = RdmaTransport.open(conf, options);
        } catch (IOException | RuntimeException e) {
            throw MapReduceRdmaConf.namingMapReduceKeys(e);
        }
        try {
            this.pool = new BufferPool(BufferPoolOptions.from(conf), node.sinkRegistrar());
        } catch (RuntimeException e) {
            node.close();
            throw e;
        }
    }

    /** The service of the NodeManager serving {@code host}'s outputs (its host name, the fixed port). */
    NodeAddress serviceOf(MapHost host) {
        String name = host.getHostName(); // host:port of its HTTP shuffle
        int colon = name.lastIndexOf(':');
        String h = colon > 0 ? name.substring(0, colon) : name;
        return new NodeAddress(h, servicePort, node.localAddress().provider());
    }

    /** Sends a REGISTER to {@code service} and waits for the answer (at most the request timeout). */
    ByteBuffer call(NodeAddress service, ByteBuffer request) throws IOException, InterruptedException {
        try {
            return Pauses.get(node.connect(service).call(request), conf.requestTimeoutMs());
        } catch (PeerBusyException e) { // keeps its type (busy is worth another try later), naming mapreduce.* keys
            IOException renamed = MapReduceRdmaConf.namingMapReduceKeys(e);
            PeerBusyException busy = new PeerBusyException(renamed.getMessage(), renamed.getCause());
            busy.setStackTrace(e.getStackTrace());
            throw busy;
        } catch (HandshakeRefusedException e) { // keeps its reason (staysSo), naming mapreduce.* keys
            IOException renamed = MapReduceRdmaConf.namingMapReduceKeys(e);
            HandshakeRefusedException refused = new HandshakeRefusedException(renamed.getMessage(), e.reason(),
                    renamed.getCause());
            refused.setStackTrace(e.getStackTrace());
            throw refused;
        } catch (ExecutionException e) { // the transport names spark.* keys: name the user's mapreduce.* ones
            throw MapReduceRdmaConf.namingMapReduceKeys(e.getCause());
        } catch (IOException e) {
            throw MapReduceRdmaConf.namingMapReduceKeys(e);
        } catch (TimeoutException e) {
            throw new IOException("no answer from " + service + " within " + conf.requestTimeoutMs() + " ms ("
                    + MapReduceRdmaConf.PREFIX + "requestTimeout)", e);
        }
    }

    BlockFetcher newFetcher(int threads) {
        return new BlockFetcher(node, pool, Math.max(1, conf.maxBytesInFlight() / threads),
                conf.readBlockSizeBytes(), conf.requestTimeoutMs());
    }

    /** Whether this task's node failed (its transport could not go on): its READs fail, nobody else's fault. */
    boolean nodeFailed() {
        return node.failure() != null;
    }

    /** NodeManagers whose service refused REGISTER version 2 (an older release): asked in version 1. */
    private final java.util.Set<String> version1 = ConcurrentHashMap.newKeySet();

    /** The largest control reply this reducer's transport takes ({@code maxControlMessageSize}): a REGISTER's bound. */
    int maxReplyBytes() {
        return conf.maxControlMessageSizeBytes();
    }

    /** The REGISTER version to ask {@code host}'s service in: 2, or 1 once it refused 2. */
    byte registerVersion(MapHost host) {
        return version1.contains(host.getHostName()) ? RegisterProtocol.VERSION : RegisterProtocol.LOCATED_VERSION;
    }

    /**
     * {@code host}'s service refused REGISTER version 2 ({@code why}): an older release, which is asked in version 1
     * from now on (its outputs READ through its output table: slot, metadata, bytes). Said once per host (INFO).
     */
    void speaksVersion1(MapHost host, NodeAddress service, String why) {
        if (version1.add(host.getHostName())) {
            LOG.info("rdma-shuffle: the rdma-shuffle service at {} is of an older release ({}): its map outputs are"
                    + " READ through its output table (three READs per map instead of one)", service, why);
        }
    }

    /** Why {@code host}'s outputs go over HTTP, or null while they are READ. */
    String httpReason(MapHost host) {
        return viaHttp.get(host.getHostName());
    }

    /** From now on {@code host}'s outputs go over HTTP; the first time for a host, one WARN says why. */
    void useHttp(MapHost host, String why) {
        if (viaHttp.putIfAbsent(host.getHostName(), why) == null) {
            LOG.warn("rdma-shuffle: map outputs of {} are fetched with Hadoop's HTTP shuffle from now on: {}",
                    host.getHostName(), why);
        }
    }

    /**
     * {@code host}'s service could not be asked (a REGISTER not sent or not answered, {@code e}). What cannot change
     * while the job runs ({@link #staysSo}: another protocol or version on the port, a relay, …) sends the host to
     * HTTP from now on (false); anything else — busy, refused or lost connections, no answer, a job the service
     * does not know (yet: a restarted service) — sends the host's outputs over HTTP for a while, then READs are
     * tried again (true).
     */
    boolean cannotAsk(MapHost host, NodeAddress service, IOException e) {
        if (staysSo(e)) {
            useHttp(host, "its rdma-shuffle service at " + service + " cannot be asked: " + e.getMessage());
            return false;
        }
        later(host, service, e instanceof PeerBusyException ? Later.BUSY : Later.DOWN, e.getMessage());
        return true;
    }

    /**
     * Whether {@code e}, a failure to ask a service, says something that does not change while a job runs: the
     * handshake was refused for a reason that does not ({@link HandshakeRefusedException.Reason#mayChange()}): the
     * peer speaks another protocol or version, keeps no per-job secrets (or wants one and got none), has
     * authentication off, or the connection reached another address than the one dialled (a relay). An unknown job
     * or wrong secret may change (a restarted service learns the job again).
     */
    static boolean staysSo(Throwable e) {
        return e instanceof HandshakeRefusedException refused && !refused.mayChange();
    }

    /**
     * {@code host}'s outputs go over HTTP for a while ({@link #BUSY_FIRST_WAIT_MS}, doubling while the service
     * stays so, to {@link #BUSY_MAX_WAIT_MS}), then READs are tried again. One WARN per host each time the kind of
     * trouble changes.
     */
    void later(MapHost host, NodeAddress service, Later kind, String why) {
        long now = nanoClock.getAsLong();
        String what = kind == Later.BUSY ? "is busy" : "cannot be asked";
        Wait w = waits.compute(host.getHostName(), (h, last) -> {
            long waitMs = last == null ? BUSY_FIRST_WAIT_MS : Math.min(BUSY_MAX_WAIT_MS, last.waitMs() * 2);
            long jittered = Math.round(waitMs * (1 - WAIT_JITTER + 2 * WAIT_JITTER * jitter.getAsDouble()));
            return new Wait(kind, now + TimeUnit.MILLISECONDS.toNanos(jittered), waitMs, jittered,
                    "its rdma-shuffle service at " + service + " " + what + " (for " + jittered + " ms after: " + why
                    + ")");
        });
        if (said.put(host.getHostName(), kind) != kind) {
            LOG.warn("rdma-shuffle: the rdma-shuffle service at {} {}: map outputs of {} go over Hadoop's HTTP "
                    + "shuffle for {} ms, then READs are tried again (the wait doubles, to {} s at most, while it "
                    + "stays so; said once per host until it answers, counted in {}): {}", service, what,
                    host.getHostName(), w.jitteredMs(), BUSY_MAX_WAIT_MS / 1000,
                    kind == Later.BUSY ? "SERVICE_BUSY" : "SERVICE_UNREACHABLE", why);
        }
    }

    /** Why {@code host}'s outputs go over HTTP for now (its READs wait, and the wait is not over), or null. */
    String busyReason(MapHost host) {
        Wait w = waits.get(host.getHostName());
        return w == null || nanoClock.getAsLong() - w.untilNanos() >= 0 ? null : w.why();
    }

    /**
     * {@code host}'s service answered a REGISTER with {@code status}: as {@link #answered(MapHost)}, but for an
     * answer busy or "unknown job", after which the service is still at its limits or not back: its wait keeps
     * growing.
     */
    void answered(MapHost host, byte status) {
        if (status != RegisterProtocol.BUSY && status != RegisterProtocol.UNKNOWN_JOB) {
            answered(host);
        }
    }

    /** {@code host}'s service answered a REGISTER: a later trouble waits the first wait again, and is said again. */
    void answered(MapHost host) {
        waits.remove(host.getHostName());
        Later was = said.remove(host.getHostName());
        if (was != null) {
            LOG.info("rdma-shuffle: the rdma-shuffle service of {} answers again: its map outputs are READ",
                    host.getHostName());
        }
    }

    int hostsViaHttp() {
        return viaHttp.size();
    }

    /** The pool's counters (tests: every buffer back once the task's fetchers and this client closed). */
    org.rdmashuffle.pool.BufferPoolStats poolStats() {
        return pool.stats();
    }

    @Override
    public void close() {
        try {
            node.close();
        } finally {
            pool.close();
        }
    }
}
