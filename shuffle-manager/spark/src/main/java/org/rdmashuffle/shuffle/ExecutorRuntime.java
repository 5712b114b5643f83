package org.rdmashuffle.shuffle;

import org.rdmashuffle.shuffle.core.*;
import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import org.apache.spark.SparkEnv;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What one executor runs for the shuffle: its node, its receive-buffer pool, its output tables
 * (one per shuffle) and its client of the driver's node directory. Started once the executor's SparkEnv
 * and BlockManager exist (early, on a thread of its own, or at first use); closed in reverse order.
 */
final class ExecutorRuntime implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(ExecutorRuntime.class);

    final RdmaShuffleConf conf;
    final RdmaNode node;
    final BufferPool pool;
    final NodeDirectory.Client directory;
    final String executorId;
    /**
     * This node's incarnation in the driver's directory: random, so a node started again after one failed is
     * told apart from it even at the same address (a fixed port).
     */
    final long incarnation = new java.security.SecureRandom().nextLong();
    private final Map<Integer, ShuffleOutputTable> tables = new ConcurrentHashMap<>();
    /** Shuffles unregistered here (the most recent ones), so late map tasks cannot recreate their tables. */
    private final java.util.concurrent.ConcurrentSkipListSet<Integer> unregistered =
            new java.util.concurrent.ConcurrentSkipListSet<>();
    private static final int MAX_UNREGISTERED_REMEMBERED = 100_000;
    private final RemoteTables remoteTables = new RemoteTables();
    private final Map<Integer, MetadataCache> metadataCaches = new ConcurrentHashMap<>();
    private final LongAdder controlBytesRead = new LongAdder();
    private final RegistrationCap cap;
    /** Shuffles whose output table could not be registered here. */
    private final java.util.Set<Integer> noTable = ConcurrentHashMap.newKeySet();
    private final java.util.Set<String> sparkPathPeers = ConcurrentHashMap.newKeySet();
    private final LongAdder unregisteredOutputs = new LongAdder();
    /** Tasks that fetched blocks through Spark's path for want of receive memory. */
    private final LongAdder receiveMemoryFallbacks = new LongAdder();
    private final java.util.concurrent.atomic.AtomicBoolean warnedReceiveMemory =
            new java.util.concurrent.atomic.AtomicBoolean();
    private final LongAdder unregisteredOutputBytes = new LongAdder();
    private final LongAdder blocksViaSpark = new LongAdder();
    /** Shuffles dropped because the driver no longer knew them (their cleanup message did not arrive here). */
    private final LongAdder orphanShufflesDropped = new LongAdder();
    /** Drops a shuffle as Spark's cleanup message would have (the manager's unregistration, files included). */
    private final java.util.function.IntConsumer dropShuffle;
    /**
     * Looks at the node's health every second ({@link #checkHealth}) and asks the driver every
     * {@code orphanCheckInterval} about the shuffles held here.
     */
    private final java.util.concurrent.ScheduledExecutorService maintenance;
    /** Set once this runtime's node failed and was withdrawn ({@link #retire}); never cleared. */
    private final java.util.concurrent.atomic.AtomicBoolean retired = new java.util.concurrent.atomic.AtomicBoolean();
    /** Set once {@link #retire} closed the node: only then may the manager close this runtime and start anew. */
    private volatile boolean retireDone;
    private volatile String failureReason;
    private final LongAdder metadataReadsAgain = new LongAdder();
    /** Tasks that fetched blocks through Spark's path because the pool stayed at its cap past the acquire timeout. */
    private final LongAdder poolExhaustedFallbacks = new LongAdder();
    private final java.util.concurrent.atomic.AtomicBoolean warnedPoolExhausted =
            new java.util.concurrent.atomic.AtomicBoolean();
    /** Peers whose cached node address, table and metadata were dropped after a failed fetch from them. */
    private final LongAdder peersForgotten = new LongAdder();
    private final java.util.concurrent.atomic.AtomicBoolean warnedUnregistered =
            new java.util.concurrent.atomic.AtomicBoolean();

    /**
     * @param dropShuffle drops a shuffle the driver no longer knows, as Spark's cleanup message would have
     */
    ExecutorRuntime(RdmaShuffleConf conf, SparkEnv env, java.util.function.IntConsumer dropShuffle) throws IOException {
        this.conf = conf;
        this.dropShuffle = dropShuffle;
        this.executorId = env.executorId();
        String host = env.blockManager().blockManagerId().host();
        byte[] secret = null;
        if (env.securityManager().isAuthenticationEnabled()) {
            secret = env.securityManager().getSecretKey().getBytes(StandardCharsets.UTF_8);
        }
        NodeOptions options = new NodeOptions(host, host, ControlProtocol.tables(this::localTable), secret);
        // The driver's directory first: it answers in a round trip, and an early start that finds it not up
        // yet (see RdmaShuffleManager) has opened nothing to close.
        this.directory = new NodeDirectory.Client(env.conf(), env.rpcEnv());
        this.node = RdmaTransport.open(conf, options);
        BufferPool p = null;
        try {
            p = new BufferPool(BufferPoolOptions.from(conf), node.sinkRegistrar());
            directory.register(executorId, node.localAddress(), incarnation);
        } catch (RuntimeException e) {
            if (p != null) {
                p.close(); // reverse order of opening: the pool's registrations before the node that holds them
            }
            node.close();
            throw e;
        }
        this.pool = p;
        this.cap = new RegistrationCap(conf.maxRegisteredOutputBytes(), this::registeredOutputBytes);
        String name = "rdma-shuffle-maintenance-" + executorId;
        maintenance = java.util.concurrent.Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            return t;
        });
        maintenance.scheduleWithFixedDelay(this::checkHealth, HEALTH_CHECK_MS, HEALTH_CHECK_MS, TimeUnit.MILLISECONDS);
        long every = conf.orphanCheckIntervalMs();
        if (every > 0) {
            maintenance.scheduleWithFixedDelay(this::dropOrphanShuffles, every, every, TimeUnit.MILLISECONDS);
        }
        LOG.info("rdma-shuffle executor {} serving on {}", executorId, node.localAddress());
    }

    /** How often the maintenance thread looks at the node's health. */
    private static final long HEALTH_CHECK_MS = 1000;

    /**
     * Whether this runtime's node can no longer serve or READ: it failed (a transport loop or the device
     * could not go on), or it was withdrawn after failing. One volatile read or two: cheap on task paths.
     */
    boolean failed() {
        return retired.get() || node.failure() != null;
    }

    /** Why {@link #failed()}, for log lines and errors. */
    String failureReason() {
        String why = failureReason;
        if (why != null) {
            return why;
        }
        Throwable f = node.failure();
        return f == null ? "its node was closed" : String.valueOf(f);
    }

    /**
     * A task found the node failed: the maintenance thread withdraws it now rather than at its next tick
     * (the task itself goes on through Spark's path and does not wait for that).
     */
    void nodeFailureSeen() {
        if (!retired.get()) {
            try {
                maintenance.execute(this::checkHealth);
            } catch (java.util.concurrent.RejectedExecutionException e) {
                LOG.debug("maintenance stopped: the runtime is closing", e);
            }
        }
    }

    /** The maintenance thread's look at the node: a node that failed is withdrawn ({@link #retire}). */
    private void checkHealth() {
        try {
            if (!retired.get() && node.failure() != null) {
                retire();
            }
        } catch (Throwable t) { // a scheduled task that throws is never run again
            LOG.warn("rdma-shuffle: checking executor {}'s node failed", executorId, t);
        }
    }

    /**
     * Withdraws a node that failed, so that nobody is blamed for it: first from the driver's directory (readers
     * on other executors then take this executor's blocks through Spark's path — those whose READs to it fail
     * ask the directory again before blaming it), then the node is closed, so peers' connections are refused
     * at once instead of timing out. This executor's own reads and writes take Spark's path from the moment
     * the failure is seen ({@link #failed()}); the manager starts a new runtime once nothing uses this one.
     * On the maintenance thread; idempotent.
     */
    void retire() {
        if (!retired.compareAndSet(false, true)) {
            return;
        }
        Throwable f = node.failure();
        failureReason = "its RDMA node " + node.localAddress() + " failed: " + (f == null ? "closed" : f.toString());
        LOG.warn("rdma-shuffle: executor {}: {}. Its node leaves the driver's directory and closes; this executor "
                + "reads and writes through Spark's own shuffle path until a new node starts (when its tasks "
                + "let go of the old one); readers elsewhere take its blocks through Spark's path, blaming nobody",
                executorId, failureReason, f);
        try {
            directory.forget(executorId);
        } catch (Exception e) {
            LOG.warn("rdma-shuffle: cannot withdraw executor {}'s failed node from the driver's directory ({}); "
                    + "readers whose READs to it fail will blame it", executorId, e.toString());
        }
        try {
            node.close();
        } catch (RuntimeException e) {
            LOG.warn("rdma-shuffle: closing executor {}'s failed node", executorId, e);
        }
        retireDone = true;
    }

    /**
     * Whether this runtime was withdrawn after its node failed and no task holds anything of it any more (no
     * receive buffer in use): then it can be closed and a new one started.
     */
    boolean retiredAndUnused() {
        return retireDone && pool.stats().inUseBuffers() == 0;
    }

    private RegionDescriptor localTable(int shuffleId) {
        if (noTable.contains(shuffleId)) {
            return null; // readers take every output of it through Spark's path
        }
        ShuffleOutputTable t = tables.get(shuffleId);
        return t == null ? null : t.descriptor();
    }

    /**
     * The output table of {@code shuffleId}, created on first use; null when the shuffle was unregistered
     * here already (a map task still running when Spark cleaned its shuffle — a cancelled stage, a zombie
     * attempt — must not bring back a table nobody will remove).
     */
    ShuffleOutputTable table(int shuffleId, int numMaps) throws IOException {
        ShuffleOutputTable t = tables.get(shuffleId);
        if (t != null) {
            return t;
        }
        synchronized (tables) {
            if (unregistered.contains(shuffleId)) {
                return null;
            }
            t = tables.get(shuffleId);
            if (t == null) {
                t = new ShuffleOutputTable(node, shuffleId, numMaps);
                tables.put(shuffleId, t);
            }
            return t;
        }
    }

    /**
     * Registers a committed map output and publishes it in its shuffle's output table. Past
     * {@code maxRegisteredOutputBytes}, or when registering fails (locked-memory or mapping limits of
     * the host), the output is published as left to Spark's own path instead — one WARN per executor,
     * counted in {@link #stats()} — unless {@code fallback=never}, which fails the map task.
     */
    void publish(int shuffleId, int numMaps, int mapIndex, long mapId, File data, long[] offsets) {
        long bytes = offsets[offsets.length - 1];
        ShuffleOutputTable table;
        if (failed()) {
            // The node is withdrawn (or about to be): readers take this executor's outputs through Spark's path.
            nodeFailureSeen();
            unregisteredOutputs.increment();
            unregisteredOutputBytes.add(bytes);
            LOG.debug("map output {} of shuffle {} is not registered: {}", mapIndex, shuffleId, failureReason());
            return;
        }
        if (noTable.contains(shuffleId)) {
            leftToSpark(shuffleId, mapIndex, bytes, "its output table could not be registered", null);
            return;
        }
        try {
            table = table(shuffleId, numMaps);
            if (table == null) {
                LOG.debug("map output {} of shuffle {} committed after the shuffle was unregistered: not registered",
                        mapIndex, shuffleId);
                return;
            }
        } catch (IOException | RuntimeException e) {
            // No table to publish in: every output of the shuffle on this executor — also later ones, or
            // readers would find this one's slot empty — is read through Spark's path.
            noTable.add(shuffleId);
            leftToSpark(shuffleId, mapIndex, bytes, "its output table cannot be registered: " + e.getMessage(), e);
            return;
        }
        // Concurrent map tasks: the check and the registration are one step for the cap (a reservation), but
        // no lock is held while the file is mapped and registered, so commits do not wait for each other.
        if (!cap.reserve(bytes)) {
            leftToSpark(shuffleId, mapIndex, bytes, "registering its " + bytes + " bytes would pass "
                    + RdmaShuffleConf.MAX_REGISTERED_OUTPUT_BYTES.name() + " (" + cap.capBytes() + " bytes)", null);
            publishUnregistered(table, mapIndex, mapId);
            return;
        }
        try {
            register(table, shuffleId, mapIndex, mapId, data, offsets);
        } finally {
            cap.release(bytes);
        }
    }

    /** Marks an output left to Spark's path in its table; a table closed meanwhile (node failed) is left alone. */
    private void publishUnregistered(ShuffleOutputTable table, int mapIndex, long mapId) {
        try {
            table.publishUnregistered(mapIndex, mapId);
        } catch (RuntimeException e) {
            LOG.debug("cannot mark map output {} as left to Spark's path in its table", mapIndex, e);
        }
    }

    private void register(ShuffleOutputTable table, int shuffleId, int mapIndex, long mapId, File data,
                          long[] offsets) {
        try {
            MapOutputLayout layout = new MapOutputLayout(offsets, conf.maxRegionSizeBytes());
            table.publish(mapIndex, mapId, RegisteredMapOutput.register(node, data.toPath(), layout));
        } catch (IOException | RuntimeException e) {
            if (failed()) { // the node failed meanwhile: withdrawn, readers take Spark's path for every output here
                nodeFailureSeen();
                return;
            }
            leftToSpark(shuffleId, mapIndex, offsets[offsets.length - 1], "it cannot be registered (" + data + "): "
                    + e.getMessage(), e);
            publishUnregistered(table, mapIndex, mapId);
        }
    }

    private void leftToSpark(int shuffleId, int mapIndex, long bytes, String why, Exception cause) {
        String what = "map output " + mapIndex + " of shuffle " + shuffleId;
        if (conf.fallback() == RdmaShuffleConf.Fallback.NEVER) {
            throw new IllegalStateException("cannot serve " + what + " for RDMA reads (fallback=never): " + why,
                    withoutErrors(cause));
        }
        unregisteredOutputs.increment();
        unregisteredOutputBytes.add(bytes);
        if (warnedUnregistered.compareAndSet(false, true)) {
            LOG.warn("{} is left to Spark's own shuffle path: {}. Reducers fetch such outputs as Spark does; "
                    + "later ones are logged at DEBUG and counted in the executor's stats", what, why, cause);
        } else {
            LOG.debug("{} is left to Spark's own shuffle path: {}", what, why, cause);
        }
    }

    /**
     * {@code cause}, or — when an {@link Error} is in its chain (a failed mapping carries the
     * {@code OutOfMemoryError} of {@code vm.max_map_count}) — an exception with the chain's messages
     * and none of its errors: Spark ends an executor whose task failed with an error anywhere in the
     * chain, and a mapping limit is no reason to lose the executor's other outputs.
     */
    static Throwable withoutErrors(Throwable cause) {
        StringBuilder chain = new StringBuilder();
        boolean error = false;
        for (Throwable t = cause; t != null; t = t.getCause()) {
            error |= t instanceof Error;
            chain.append(chain.length() == 0 ? "" : "; caused by ").append(t);
        }
        return error ? new IOException(chain.toString()) : cause;
    }

    /** Bytes of map outputs this executor holds registered now. */
    long registeredOutputBytes() {
        long sum = 0;
        for (ShuffleOutputTable t : tables.values()) {
            sum += t.registeredOutputBytes();
        }
        return sum;
    }

    /**
     * A task could not get receive buffers (allocating or registering memory failed): its blocks not
     * yet READ go through Spark's path. One WARN per executor, the rest at DEBUG; counted in the stats.
     */
    void noteReceiveMemoryUnavailable(Exception e) {
        receiveMemoryFallbacks.increment();
        if (warnedReceiveMemory.compareAndSet(false, true)) {
            LOG.warn("this executor cannot get memory for receive buffers ({}); the shuffle blocks a task has not "
                    + "READ yet when it meets this are fetched through Spark's own shuffle path. Raise the "
                    + "locked-memory limit (ulimit -l), vm.max_map_count or -XX:MaxDirectMemorySize, or lower "
                    + "spark.shuffle.rdma.pool.chunkSize", e == null ? "no cause" : e.getMessage(), e);
        } else {
            LOG.debug("receive buffers unavailable; a task's remaining blocks go through Spark's path", e);
        }
    }

    /**
     * A task's READs were given up because the pool stayed at its cap past {@code pool.acquireTimeout} (other
     * tasks hold its buffers): its blocks not yet READ go through Spark's path. One WARN per executor.
     */
    void notePoolExhausted(Exception e) {
        poolExhaustedFallbacks.increment();
        if (warnedPoolExhausted.compareAndSet(false, true)) {
            LOG.warn("rdma-shuffle: the receive pool stayed at its cap ({}); a task's shuffle blocks not READ yet "
                    + "are fetched through Spark's own shuffle path instead of failing the task. Raise "
                    + "spark.shuffle.rdma.pool.maxRegisteredBytes or lower spark.shuffle.rdma.maxBytesInFlight "
                    + "(later ones are counted in fallback.poolExhaustedTasks)", e.getMessage());
        } else {
            LOG.debug("receive pool exhausted; a task's remaining blocks go through Spark's path", e);
        }
    }

    /** Counts metadata windows READ again by a task's fetcher because what landed did not make sense. */
    void addMetadataReadsAgain(long n) {
        if (n > 0) {
            metadataReadsAgain.add(n);
            LOG.info("rdma-shuffle: {} metadata window(s) READ again on executor {} because what landed did not make "
                    + "sense (fetch.metadataReadsAgain)", n, executorId);
        }
    }

    /**
     * Logs, once per executor of this runtime's life and per {@code peerExecutorId}, that blocks of
     * that peer are read through Spark's own path and why.
     */
    void noteSparkPath(String peerExecutorId, String why) {
        noteSparkPath(peerExecutorId, why, false);
    }

    /**
     * As {@link #noteSparkPath(String, String)}; {@code expected} (an operation the application asked for:
     * an executor removed while an external shuffle service serves its files, outputs migrated by
     * decommissioning) logs at INFO instead of WARN.
     */
    void noteSparkPath(String peerExecutorId, String why, boolean expected) {
        if (sparkPathPeers.add(peerExecutorId)) {
            if (expected) {
                LOG.info("reading shuffle blocks of executor {} through Spark's own shuffle path: {}", peerExecutorId,
                        why);
            } else {
                LOG.warn("reading shuffle blocks of executor {} through Spark's own shuffle path: {}", peerExecutorId,
                        why);
            }
        } else {
            LOG.debug("reading shuffle blocks of executor {} through Spark's own shuffle path: {}", peerExecutorId,
                    why);
        }
    }

    /**
     * The output table descriptor of {@code shuffleId} at {@code peer}, asked once and cached; null
     * when the peer holds no table for it (it registered none of its outputs: Spark's path serves them).
     */
    RegionDescriptor remoteTable(String peerExecutorId, NodeAddress peer, long incarnation, int shuffleId)
            throws TransportException {
        RegionDescriptor d = remoteTables.get(peerExecutorId, peer, incarnation, shuffleId);
        if (d != null) {
            return d;
        }
        RdmaChannel ch = node.connect(peer);
        ByteBuffer reply;
        try {
            reply = ch.call(ControlProtocol.lookupTable(shuffleId)).get(conf.requestTimeoutMs(), TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            throw new TransportException("cannot look up shuffle " + shuffleId + "'s output table at " + peer, e);
        }
        d = ControlProtocol.parseTableReply(reply);
        if (d == null) {
            return null;
        }
        remoteTables.put(peerExecutorId, peer, incarnation, shuffleId, d);
        return d;
    }

    /** The metadata reducers on this executor have READ for {@code shuffleId}, shared by its fetchers. */
    MetadataCache metadataCache(int shuffleId) {
        return metadataCaches.computeIfAbsent(shuffleId, id -> new MetadataCache());
    }

    /** Counts remote blocks a reducer hands to Spark's own path instead of READing them. */
    void countBlocksViaSpark(long n) {
        blocksViaSpark.add(n);
    }

    /** Counts bytes fetchers READ from output tables and metadata (not block data). */
    void addControlBytesRead(long bytes) {
        controlBytesRead.add(bytes);
    }

    /**
     * Forgets what this executor cached of {@code executorId}'s node for {@code shuffleId} after a
     * failed fetch from it: its address, its table descriptor and its outputs' metadata, so the next
     * attempt (after Spark reran the lost maps) looks everything up afresh.
     */
    void forgetPeer(String executorId, NodeAddress peer, int shuffleId) {
        peersForgotten.increment();
        directory.invalidate(executorId);
        if (peer != null) {
            remoteTables.forget(executorId, peer, shuffleId);
            MetadataCache c = metadataCaches.get(shuffleId);
            if (c != null) {
                c.forget(peer);
            }
        }
    }

    /**
     * Learns the executors Spark removed since last asked (at most once a second; see
     * {@link NodeDirectory.Client#refreshRemoved()}) and forgets what this executor cached of their nodes
     * for every shuffle: table descriptors and metadata of nodes that are gone.
     */
    void refreshRemoved() {
        for (NodeAddress gone : directory.refreshRemoved()) {
            remoteTables.forgetNode(gone);
            for (MetadataCache c : metadataCaches.values()) {
                c.forget(gone);
            }
        }
    }

    void unregisterShuffle(int shuffleId) {
        ShuffleOutputTable t;
        synchronized (tables) { // with table(): no table of this shuffle can be created after this
            unregistered.add(shuffleId);
            while (unregistered.size() > MAX_UNREGISTERED_REMEMBERED) {
                unregistered.pollFirst(); // shuffle ids grow: the oldest are the least likely to come back
            }
            t = tables.remove(shuffleId);
        }
        if (t != null) {
            t.close();
        }
        metadataCaches.remove(shuffleId);
        noTable.remove(shuffleId);
        remoteTables.forgetShuffle(shuffleId);
    }

    /**
     * Every shuffle this executor holds anything of: an output table, a table that could not be
     * registered, cached metadata or a cached table of a peer's outputs.
     */
    int[] heldShuffles() {
        java.util.TreeSet<Integer> held = new java.util.TreeSet<>(tables.keySet());
        held.addAll(noTable);
        held.addAll(metadataCaches.keySet());
        remoteTables.addShufflesTo(held);
        return held.stream().mapToInt(Integer::intValue).toArray();
    }

    /**
     * Asks the driver about every shuffle held here and drops those it no longer knows. Spark tells
     * executors once that it cleaned a shuffle; an executor whose block manager it had removed at that
     * moment (after a fetch failure, until the executor registers again) never hears it, and would keep
     * that shuffle's outputs registered and its files on disk until it exits.
     */
    void dropOrphanShuffles() {
        try {
            int[] held = heldShuffles();
            if (held.length == 0) {
                return;
            }
            int[] gone;
            try {
                gone = directory.goneShuffles(held);
            } catch (Exception e) { // RpcTimeoutException is checked; the next check asks again
                LOG.debug("cannot ask the driver which of the {} shuffles held here it cleaned", held.length, e);
                return;
            }
            for (int id : gone) {
                if (java.util.Arrays.binarySearch(held, id) < 0) {
                    continue; // held is sorted; only what was asked about is dropped
                }
                // One whose cleanup did arrive (a late reader cached its metadata again) goes quietly.
                boolean missed = !unregistered.contains(id);
                try {
                    dropShuffle.accept(id);
                } catch (RuntimeException e) {
                    LOG.warn("rdma-shuffle: executor {} cannot drop shuffle {}, which the driver cleaned", executorId,
                            id, e);
                    continue;
                }
                if (missed) {
                    orphanShufflesDropped.increment();
                    LOG.info("rdma-shuffle: the driver no longer knows shuffle {} (its cleanup did not reach executor "
                            + "{}); dropped its registrations, cached metadata and files here", id, executorId);
                }
            }
        } catch (RuntimeException e) { // a scheduled task that throws is never run again
            LOG.warn("rdma-shuffle: checking executor {}'s shuffles against the driver failed", executorId, e);
        }
    }

    /**
     * What this executor holds and has moved, for operators and tests.
     *
     * @param nodeRestarts nodes this executor started after one failed (the manager counts them)
     */
    RdmaShuffleManager.ExecutorStats stats(long nodeRestarts) {
        return new RdmaShuffleManager.ExecutorStats(executorId, node.stats(), pool.stats(), List.copyOf(tables.keySet()),
                registeredOutputBytes(), controlBytesRead.sum(), unregisteredOutputs.sum(),
                unregisteredOutputBytes.sum(), receiveMemoryFallbacks.sum(), blocksViaSpark.sum(), peersForgotten.sum(),
                orphanShufflesDropped.sum(), metadataReadsAgain.sum(), poolExhaustedFallbacks.sum(),
                failed() ? 1 : 0, nodeRestarts);
    }

    @Override
    public void close() {
        maintenance.shutdownNow(); // last started, first stopped: no check runs on what closes below
        try {
            if (!maintenance.awaitTermination(10, TimeUnit.SECONDS)) {
                LOG.warn("rdma-shuffle: executor {}'s maintenance thread did not stop within 10 s", executorId);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (Integer id : tables.keySet()) {
            unregisterShuffle(id);
        }
        node.close(); // first: its channels stop and complete their READs before their buffers' memory goes
        pool.close();
    }
}
