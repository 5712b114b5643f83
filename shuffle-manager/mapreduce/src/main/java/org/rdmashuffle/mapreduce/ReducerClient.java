package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.LongSupplier;
import org.apache.hadoop.mapreduce.task.reduce.MapHost;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.serve.MapOutputServer;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.PeerBusyException;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A reduce task's side of the transport: its node (outgoing connections only, each proving the job's shuffle
 * secret for the job's realm), its pool of registered receive buffers, and which NodeManagers it fetches from
 * over HTTP instead (no service there, the service does not know the job, or it refused) — each said once in a
 * WARN. A service that is busy (at its connection limits: {@link PeerBusyException}) is not given up on: that
 * host's outputs go over HTTP for a while ({@link #BUSY_FIRST_WAIT_MS}, doubling to {@link #BUSY_MAX_WAIT_MS}
 * while it stays busy), then READs are tried again. Shared by the task's fetcher threads; each of them has its
 * own {@link BlockFetcher}.
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

    /** A NodeManager whose service said busy: its outputs go over HTTP until {@code untilNanos}. */
    private record Busy(long untilNanos, long waitMs, String why) {
    }

    /** NodeManager → its back-off after a busy answer; gone once its service answers a REGISTER. */
    private final Map<String, Busy> busy = new ConcurrentHashMap<>();
    /** NodeManagers whose busy answer was logged (once each). */
    private final java.util.Set<String> busyLogged = ConcurrentHashMap.newKeySet();
    private final LongSupplier nanoClock;

    ReducerClient(RdmaShuffleConf serviceConf, String realm, byte[] secret) throws IOException {
        this(serviceConf, realm, secret, System::nanoTime);
    }

    /** With the clock the busy back-off is measured by ({@link System#nanoTime} but in tests). */
    ReducerClient(RdmaShuffleConf serviceConf, String realm, byte[] secret, LongSupplier nanoClock) throws IOException {
        this.nanoClock = nanoClock;
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
            return node.connect(service).call(request).get(conf.requestTimeoutMs(), TimeUnit.MILLISECONDS);
        } catch (PeerBusyException e) { // keeps its type (busy is worth another try later), naming mapreduce.* keys
            IOException renamed = MapReduceRdmaConf.namingMapReduceKeys(e);
            PeerBusyException busy = new PeerBusyException(renamed.getMessage(), renamed.getCause());
            busy.setStackTrace(e.getStackTrace());
            throw busy;
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
     * {@code host}'s service could not be asked (a REGISTER not sent or not answered, {@code e}): if it said busy,
     * its outputs go over HTTP for a while and READs are tried again after it (true); otherwise from now on (false).
     */
    boolean cannotAsk(MapHost host, NodeAddress service, IOException e) {
        if (!(e instanceof PeerBusyException)) {
            useHttp(host, "its rdma-shuffle service at " + service + " cannot be asked: " + e.getMessage());
            return false;
        }
        long now = nanoClock.getAsLong();
        Busy b = busy.compute(host.getHostName(), (h, last) -> {
            long waitMs = last == null ? BUSY_FIRST_WAIT_MS : Math.min(BUSY_MAX_WAIT_MS, last.waitMs() * 2);
            return new Busy(now + TimeUnit.MILLISECONDS.toNanos(waitMs), waitMs, "its rdma-shuffle service at "
                    + service + " is busy (for " + waitMs + " ms after: " + e.getMessage() + ")");
        });
        if (busyLogged.add(host.getHostName())) {
            LOG.warn("rdma-shuffle: the rdma-shuffle service at {} is busy: map outputs of {} go over Hadoop's HTTP "
                    + "shuffle for {} ms, then READs are tried again (the wait doubles, to {} s at most, while it "
                    + "stays busy; said once per host, counted in SERVICE_BUSY): {}", service, host.getHostName(),
                    b.waitMs(), BUSY_MAX_WAIT_MS / 1000, e.getMessage());
        }
        return true;
    }

    /** Why {@code host}'s outputs go over HTTP for now (its service said busy, and the wait is not over), or null. */
    String busyReason(MapHost host) {
        Busy b = busy.get(host.getHostName());
        return b == null || nanoClock.getAsLong() - b.untilNanos() >= 0 ? null : b.why();
    }

    /** {@code host}'s service answered a REGISTER: a later busy answer waits the first wait again. */
    void answered(MapHost host) {
        busy.remove(host.getHostName());
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
