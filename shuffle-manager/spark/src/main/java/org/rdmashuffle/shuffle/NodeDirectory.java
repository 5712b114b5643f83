package org.rdmashuffle.shuffle;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.SparkConf;
import org.apache.spark.rpc.RpcCallContext;
import org.apache.spark.rpc.RpcEndpoint;
import org.apache.spark.rpc.RpcEndpointRef;
import org.apache.spark.rpc.RpcEnv;
import org.rdmashuffle.shuffle.core.directory.PeerDirectory;
import org.rdmashuffle.shuffle.core.directory.PeerDirectory.Found;
import org.rdmashuffle.shuffle.core.directory.TransportSummary;
import org.rdmashuffle.transport.TransportChoice;
import org.rdmashuffle.transport.NodeAddress;
import scala.PartialFunction;
import scala.runtime.BoxedUnit;

/**
 * The driver's directory of executors' RDMA nodes, on Spark's own RPC: an endpoint on the driver
 * (started by the driver's shuffle manager) and a client on each executor that registers its node
 * once and looks peers up on demand (cached). Spark's RPC already reaches the driver from every
 * executor on every cluster manager, so no address has to be handed out of band.
 */
public final class NodeDirectory {
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(NodeDirectory.class);
    public static final String ENDPOINT_NAME = "rdma-shuffle-node-directory";

    private NodeDirectory() {
    }

    /**
     * An executor announces its node: its encoded address and its incarnation (random, new for every node
     * the executor starts — a node started again after one failed may have the same address).
     */
    public record Register(String executorId, byte[] address, long incarnation) implements Serializable {
        private static final long serialVersionUID = 1L;
    }

    /**
     * Where is that executor's node? Replied with its encoded address, an empty array when the driver
     * knows none, or {@link #REMOVED} when Spark removed the executor.
     */
    public record Lookup(String executorId) implements Serializable {
        private static final long serialVersionUID = 1L;
    }

    /** The reply to a {@link Lookup} of an executor Spark removed (one byte: no encoded address is that short). */
    static final byte[] REMOVED = {'R'};

    /** A lookup's reply: the encoded address, then the incarnation. */
    private static byte[] reply(byte[] address, long incarnation) {
        return ByteBuffer.allocate(address.length + 8).put(address).putLong(incarnation).array();
    }

    /** Reads a lookup's reply. */
    static Found parse(byte[] enc) {
        if (enc.length == 0) {
            return Found.NONE;
        }
        if (java.util.Arrays.equals(enc, REMOVED)) {
            return Found.GONE;
        }
        ByteBuffer b = ByteBuffer.wrap(enc);
        NodeAddress a = NodeAddress.decode(b);
        return new Found(a, false, b.remaining() >= 8 ? b.getLong() : 0);
    }

    /**
     * Which executors did Spark remove, from the {@code from}-th on? Replied with a {@code String[]}: the
     * index of the first one (in decimal), then their ids (at most {@link Endpoint#MAX_REMOVED_PER_REPLY}).
     * Replies are JDK types only: an executor deserialises them with Spark's own class loader, which does
     * not see the plugin when it came with {@code --jars}.
     */
    public record RemovedSince(int from) implements Serializable {
        private static final long serialVersionUID = 1L;
    }

    /**
     * Which of these shuffles does Spark no longer know? An executor asks it of the shuffles it holds anything
     * of, to drop those whose cleanup it missed. Replied with an {@code int[]} (a JDK type, as above): the ids
     * among {@code held} that the driver's map output tracker does not hold.
     */
    public record GoneShuffles(int[] held) implements Serializable {
        private static final long serialVersionUID = 1L;
    }

    /** The most shuffle ids an executor asks about at once; it asks again for the rest. */
    static final int MAX_SHUFFLES_PER_ASK = 10_000;

    /** An executor is gone. */
    public record Forget(String executorId) implements Serializable {
        private static final long serialVersionUID = 1L;
    }

    /**
     * Which transport an executor runs and why ({@link TransportChoice}'s fields; provider
     * {@link TransportSummary#NONE} when its transport did not start and it shuffles through Spark's path),
     * sent once it started (or failed to), for the driver's summary. Both sides are the same jar.
     */
    public record Transport(String executorId, String provider, String device, String api, String reason,
                            boolean fellBack) implements Serializable {
        private static final long serialVersionUID = 1L;

        static Transport of(String executorId, TransportChoice c) {
            return new Transport(executorId, c.provider(), c.device(), c.api(), c.reason(), c.fellBack());
        }

        TransportChoice choice() {
            return new TransportChoice(provider, device, api, reason, fellBack);
        }
    }

    /** The driver side. */
    public static final class Endpoint implements RpcEndpoint {
        private final RpcEnv rpcEnv;
        /** Whether Spark's map output tracker (the driver's) still holds a shuffle. */
        private final java.util.function.IntPredicate shuffleKnown;
        private final Map<String, byte[]> nodes = new ConcurrentHashMap<>();
        /**
         * Executors Spark removed, in the order it removed them: the last {@link #MAX_REMOVED} (ids are short),
         * numbered from {@code removedBase}; older ones are forgotten (a reader then learns of one when
         * connecting to it fails). Registrations, removals and lookups hold {@code this}: the listener bus
         * and the RPC dispatcher's threads call in concurrently.
         */
        private final java.util.ArrayDeque<String> removedLog = new java.util.ArrayDeque<>();
        private final java.util.Set<String> removed = new java.util.HashSet<>();
        private int removedBase;
        static final int MAX_REMOVED = 100_000;
        static final int MAX_REMOVED_PER_REPLY = 10_000;
        /** Which transport each executor runs, and when that is worth a line in the driver's log. */
        private final TransportSummary transports;
        private final java.util.concurrent.ScheduledExecutorService summaryTimer;

        /**
         * @param expectedExecutors how many executors the application asked for (0: cannot tell), which makes
         *     the transport summary's first line come as soon as they all reported
         */
        public Endpoint(RpcEnv rpcEnv, java.util.function.IntPredicate shuffleKnown, int expectedExecutors) {
            this.rpcEnv = rpcEnv;
            this.shuffleKnown = shuffleKnown;
            this.transports = new TransportSummary("executors", expectedExecutors);
            this.summaryTimer = java.util.concurrent.Executors.newSingleThreadScheduledExecutor(r -> {
                Thread t = new Thread(r, "rdma-shuffle-transport-summary");
                t.setDaemon(true);
                return t;
            });
            summaryTimer.scheduleWithFixedDelay(this::logSummaryIfDue, 1, 1, java.util.concurrent.TimeUnit.SECONDS);
        }

        /**
         * Starts the endpoint on {@code rpcEnv} (the driver's), answering {@link GoneShuffles} from
         * {@code shuffleKnown}; the transport summary waits for {@code expectedExecutors} (0: cannot tell).
         */
        public static Endpoint start(RpcEnv rpcEnv, java.util.function.IntPredicate shuffleKnown,
                                     int expectedExecutors) {
            Endpoint e = new Endpoint(rpcEnv, shuffleKnown, expectedExecutors);
            rpcEnv.setupEndpoint(ENDPOINT_NAME, e);
            return e;
        }

        /** As {@link #start(RpcEnv, java.util.function.IntPredicate, int)}, expecting no executor count. */
        public static Endpoint start(RpcEnv rpcEnv, java.util.function.IntPredicate shuffleKnown) {
            return start(rpcEnv, shuffleKnown, 0);
        }

        /**
         * Which transport the executors known now run, in one line ({@link TransportSummary#line()}), e.g.
         * {@code 3 executors: 1 verbs (on mlx5_0: 1), 2 tcp (auto: no RDMA device: 1; provider=tcp: 1)}.
         */
        public String transportSummary() {
            return transports.line();
        }

        /** What every executor that ever reported ran ({@link TransportSummary#lifeLine()}). */
        public String transportSummaryOverApplication() {
            return transports.lifeLine();
        }

        private void logSummaryIfDue() {
            try {
                String line = transports.due(System.nanoTime());
                if (line != null) {
                    LOG.info("rdma-shuffle transports: {}", line);
                }
            } catch (RuntimeException e) { // the timer must keep running
                LOG.debug("rdma-shuffle: cannot sum up the executors' transports", e);
            }
        }

        /**
         * The application ends: stops the summary's timer and logs, once, what every executor that reported
         * ran over the application (nothing when none did).
         */
        public void stop() {
            if (summaryTimer.isShutdown()) {
                return;
            }
            summaryTimer.shutdownNow();
            if (!transports.lifeLine().startsWith("0 ")) {
                LOG.info("rdma-shuffle transports at application end: {}", transports.lifeLine());
            }
        }

        @Override
        public RpcEnv rpcEnv() {
            return rpcEnv;
        }

        public int size() {
            return nodes.size();
        }

        /**
         * Spark removed {@code executorId} (killed, lost, released by dynamic allocation or decommissioned):
         * lookups of it answer {@link #REMOVED} from now on, so readers do not connect to a node that is gone.
         */
        public synchronized void executorRemoved(String executorId) {
            if (removed.add(executorId)) {
                removedLog.addLast(executorId);
                if (removedLog.size() > MAX_REMOVED) {
                    removed.remove(removedLog.removeFirst());
                    removedBase++;
                }
            }
            nodes.remove(executorId);
            transports.remove(executorId, System.nanoTime());
            logSummaryIfDue();
        }

        private synchronized void register(String executorId, byte[] address) {
            if (!removed.contains(executorId)) { // a late registration of a removed executor stays out
                nodes.put(executorId, address.clone());
            }
        }

        private synchronized byte[] lookup(String executorId) {
            if (removed.contains(executorId)) {
                return REMOVED;
            }
            byte[] a = nodes.get(executorId);
            return a != null ? a : new byte[0];
        }

        private void transportReported(Transport t) {
            TransportChoice c = t.choice();
            synchronized (this) {
                if (removed.contains(t.executorId())) {
                    return; // late, as a late registration
                }
                transports.put(t.executorId(), c, System.nanoTime());
            }
            if (c.fellBack() || c.provider().equals(TransportSummary.NONE)) {
                LOG.debug("executor {} runs {}", t.executorId(), c.describe());
            }
            logSummaryIfDue();
        }

        private int[] gone(int[] held) {
            if (held.length > MAX_SHUFFLES_PER_ASK) {
                throw new IllegalArgumentException("asked about " + held.length + " shuffles at once; at most "
                        + MAX_SHUFFLES_PER_ASK);
            }
            return java.util.Arrays.stream(held).filter(id -> !shuffleKnown.test(id)).toArray();
        }

        /** The index of the first id, then the ids: from {@code from} on, or from the oldest still kept. */
        private synchronized String[] removedSince(int from) {
            int n = removedLog.size();
            int skip = Math.max(0, Math.min(from - removedBase, n));
            int count = Math.min(n - skip, MAX_REMOVED_PER_REPLY);
            String[] reply = new String[1 + count];
            reply[0] = Integer.toString(removedBase + skip);
            java.util.Iterator<String> it = removedLog.iterator();
            for (int i = 0; i < skip; i++) {
                it.next();
            }
            for (int i = 0; i < count; i++) {
                reply[1 + i] = it.next();
            }
            return reply;
        }

        @Override
        public PartialFunction<Object, BoxedUnit> receiveAndReply(RpcCallContext context) {
            return SparkInterop.replies(m -> m instanceof Register || m instanceof Lookup || m instanceof Forget
                    || m instanceof RemovedSince || m instanceof GoneShuffles || m instanceof Transport, m -> {
                        if (m instanceof Register r) {
                            NodeAddress.decode(ByteBuffer.wrap(r.address())); // refuse garbage early
                            register(r.executorId(), reply(r.address(), r.incarnation()));
                            context.reply(Boolean.TRUE);
                        } else if (m instanceof Lookup l) {
                            context.reply(lookup(l.executorId()));
                        } else if (m instanceof RemovedSince r) {
                            context.reply(removedSince(r.from()));
                        } else if (m instanceof GoneShuffles g) {
                            context.reply(gone(g.held()));
                        } else if (m instanceof Forget f) {
                            context.reply(nodes.remove(f.executorId()) != null);
                        } else if (m instanceof Transport t) {
                            transportReported(t);
                            context.reply(Boolean.TRUE);
                        }
                    });
        }
    }

    /**
     * The executor side: a reference to the driver's endpoint and a cache of looked-up nodes; the
     * {@link PeerDirectory} an executor's runtime registers with and its readers look peers up in.
     */
    public static final class Client implements PeerDirectory {
        private final RpcEndpointRef driver;
        private final Map<String, Found> cache = new ConcurrentHashMap<>();
        /** Executors Spark removed that this client has heard of, and how many of the driver's list it has. */
        private final java.util.Set<String> removedKnown = ConcurrentHashMap.newKeySet();
        private final java.util.concurrent.locks.ReentrantLock refreshing = new java.util.concurrent.locks.ReentrantLock();
        private int removedSeen;
        private long removedAskedNanos;
        private static final long REMOVED_REFRESH_NANOS = 1_000_000_000L;
        /** The longest a task waits for the driver about removals; past it, it goes on without the answer. */
        private static final org.apache.spark.rpc.RpcTimeout REMOVED_TIMEOUT = SparkInterop.rpcTimeout(5,
                "rdma-shuffle's removed-executors query (5 s)");
        private static final org.apache.spark.rpc.RpcTimeout GONE_TIMEOUT = SparkInterop.rpcTimeout(5,
                "rdma-shuffle's cleaned-shuffles query (5 s)");

        public Client(SparkConf conf, RpcEnv rpcEnv) {
            this.driver = SparkInterop.driverEndpoint(ENDPOINT_NAME, conf, rpcEnv);
        }

        @Override
        public void register(String executorId, NodeAddress address, long incarnation) {
            SparkInterop.ask(driver, new Register(executorId, address.encode(), incarnation));
            cache.put(executorId, new Found(address, false, incarnation));
        }

        /**
         * Tells the driver which transport this executor runs ({@code choice}) for its summary, at most 5 s;
         * a failure is logged at DEBUG (the summary then misses this executor).
         */
        public void reportTransport(String executorId, TransportChoice choice) {
            try {
                SparkInterop.ask(driver, Transport.of(executorId, choice), REMOVED_TIMEOUT);
            } catch (Exception e) { // RpcTimeoutException is checked
                LOG.debug("cannot tell the driver which transport executor {} runs", executorId, e);
            }
        }

        /** The node of {@code executorId}, or null when the driver knows none (or Spark removed it). */
        public NodeAddress lookup(String executorId) {
            return find(executorId).address();
        }

        /** What the driver knows of {@code executorId}'s node (cached once found). */
        @Override
        public Found find(String executorId) {
            Found f = cache.get(executorId);
            if (f != null) {
                return f;
            }
            f = parse((byte[]) SparkInterop.ask(driver, new Lookup(executorId)));
            if (f.address() != null) {
                cache.put(executorId, f);
            }
            return f;
        }

        /**
         * Learns the executors Spark removed since this client last asked, at most once a second (one small
         * RPC to the driver, at most 5 s; never two at once — a task that finds another asking goes on):
         * readers call it before choosing how to fetch when an external shuffle service serves removed
         * executors' files, so they do not try to connect to nodes that are gone.
         *
         * @return the cached nodes of executors learnt removed now, for the caller to forget what it holds of them
         */
        @Override
        public java.util.List<NodeAddress> refreshRemoved() {
            java.util.List<NodeAddress> forgotten = new java.util.ArrayList<>();
            if (!refreshing.tryLock()) {
                return forgotten; // another task asks right now: this one goes on with what is known
            }
            try {
                long now = System.nanoTime();
                if (removedAskedNanos != 0 && now - removedAskedNanos < REMOVED_REFRESH_NANOS) {
                    return forgotten;
                }
                removedAskedNanos = now;
                for (;;) {
                    String[] r;
                    try {
                        r = (String[]) SparkInterop.ask(driver, new RemovedSince(removedSeen), REMOVED_TIMEOUT);
                    } catch (Exception e) { // RpcTimeoutException is checked: catch all; connecting tells later
                        LOG.debug("cannot ask the driver which executors were removed", e);
                        return forgotten;
                    }
                    for (int i = 1; i < r.length; i++) {
                        removedKnown.add(r[i]);
                        Found a = cache.remove(r[i]);
                        if (a != null) {
                            forgotten.add(a.address());
                        }
                    }
                    removedSeen = Integer.parseInt(r[0]) + r.length - 1;
                    if (r.length - 1 < Endpoint.MAX_REMOVED_PER_REPLY) {
                        return forgotten;
                    }
                }
            } finally {
                refreshing.unlock();
            }
        }

        /** Whether this client has heard that Spark removed {@code executorId} (see {@link #refreshRemoved()}). */
        @Override
        public boolean knownRemoved(String executorId) {
            return removedKnown.contains(executorId);
        }

        /**
         * What the driver knows of {@code executorId}'s node now, asked afresh (its cached node is dropped;
         * the answer is cached as {@link #find} caches it), at most 5 s: a reader asks it before blaming an
         * executor whose node it could not reach, which may have withdrawn its node (it failed) or started a
         * new one.
         *
         * @return the answer, or null when the driver could not be asked
         */
        @Override
        public Found recheck(String executorId) {
            cache.remove(executorId);
            Found f;
            try {
                f = parse((byte[]) SparkInterop.ask(driver, new Lookup(executorId), REMOVED_TIMEOUT));
            } catch (Exception e) { // RpcTimeoutException is checked
                LOG.debug("cannot ask the driver about executor {}'s node", executorId, e);
                return null;
            }
            if (f.removed()) {
                removedKnown.add(executorId);
            } else if (f.address() != null) {
                cache.put(executorId, f);
            }
            return f;
        }

        /** Whether Spark removed {@code executorId}, asked of the driver now (its cached node is dropped). */
        @Override
        public boolean removed(String executorId) {
            cache.remove(executorId);
            boolean gone;
            try {
                byte[] enc = (byte[]) SparkInterop.ask(driver, new Lookup(executorId), REMOVED_TIMEOUT);
                gone = java.util.Arrays.equals(enc, REMOVED);
            } catch (Exception e) { // RpcTimeoutException is checked
                LOG.debug("cannot ask the driver whether executor {} was removed", executorId, e);
                return false;
            }
            if (gone) {
                removedKnown.add(executorId);
            }
            return gone;
        }

        /**
         * The shuffles among {@code held} that the driver no longer knows (asked in batches of at most
         * {@link #MAX_SHUFFLES_PER_ASK}, each at most 5 s).
         *
         * @throws Exception when the driver cannot be asked (unreachable, timed out, or too old to know the question)
         */
        @Override
        public int[] goneShuffles(int[] held) throws Exception {
            java.util.stream.IntStream.Builder gone = java.util.stream.IntStream.builder();
            for (int from = 0; from < held.length; from += MAX_SHUFFLES_PER_ASK) {
                int[] batch = java.util.Arrays.copyOfRange(held, from,
                        Math.min(held.length, from + MAX_SHUFFLES_PER_ASK));
                for (int id : (int[]) SparkInterop.ask(driver, new GoneShuffles(batch), GONE_TIMEOUT)) {
                    gone.add(id);
                }
            }
            return gone.build().toArray();
        }

        /** Drops a cached entry (after a fetch failure, the executor may have restarted elsewhere). */
        @Override
        public void invalidate(String executorId) {
            cache.remove(executorId);
        }

        /**
         * Withdraws {@code executorId}'s node from the driver's directory (readers then take its blocks through
         * Spark's path), at most 5 s.
         *
         * @throws Exception when the driver could not be told
         */
        @Override
        public void forget(String executorId) throws Exception {
            cache.remove(executorId);
            SparkInterop.ask(driver, new Forget(executorId), REMOVED_TIMEOUT);
        }
    }
}
