package org.rdmashuffle.shuffle;

import java.io.File;
import java.io.IOException;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.shuffle.IndexShuffleBlockResolver;
import org.apache.spark.shuffle.ShuffleBlockResolver;
import org.apache.spark.shuffle.ShuffleHandle;
import org.apache.spark.shuffle.ShuffleManager;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.shuffle.ShuffleReader;
import org.apache.spark.shuffle.ShuffleWriteMetricsReporter;
import org.apache.spark.shuffle.ShuffleWriter;
import org.apache.spark.shuffle.sort.SortShuffleManager;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPoolStats;
import org.rdmashuffle.transport.NodeStats;
import org.rdmashuffle.transport.RdmaTransport;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A Spark shuffle whose reducers pull map outputs with one-sided RDMA READs. Enable with
 * {@code spark.shuffle.manager=org.rdmashuffle.shuffle.RdmaShuffleManager}. Writing is Spark's sort
 * shuffle; each committed map output is registered as memory regions; readers fetch remote blocks
 * with READs and local ones from disk. The node directory (driver) and the runtime (executors) start on
 * a thread of their own as soon as SparkEnv and the BlockManager are ready (Spark builds this before
 * both), else at first use.
 *
 * <p>Fallback ({@code spark.shuffle.rdma.fallback}): when the transport cannot start, {@code auto}
 * uses Spark's sort shuffle and logs one WARN line saying why, {@code never} fails with the reason,
 * {@code always} never starts the transport. The driver decides per application (a shuffle it
 * registers while falling back gets Spark's own handle, read and written by Spark's sort shuffle);
 * an executor whose node cannot start serves nothing over the transport and reads with Spark's
 * reader, and readers elsewhere read from it with Spark's reader too. Map outputs are always
 * Spark's own files, so every fallback path reads them.
 */
public final class RdmaShuffleManager implements ShuffleManager {
    private static final Logger LOG = LoggerFactory.getLogger(RdmaShuffleManager.class);

    /**
     * What one executor holds and has moved.
     *
     * @param executorId the executor
     * @param node its node's counters
     * @param pool its receive-buffer pool's counters
     * @param shuffles shuffles it holds an output table for
     * @param registeredOutputBytes bytes of map outputs it has registered now
     * @param controlBytesRead bytes its reducers READ from peers' output tables and metadata (not block data)
     * @param unregisteredOutputs map outputs it left to Spark's own path (past its registration cap, or
     *     registering failed), since it started
     * @param unregisteredOutputBytes their bytes
     * @param receiveMemoryFallbacks reduce tasks that fetched blocks through Spark's path because this
     *     executor could not allocate or register memory for receive buffers, since it started
     * @param blocksViaSpark remote blocks this executor's reducers fetched through Spark's own path instead of
     *     READs (their executor serves no node, left them unregistered, does not hold them in its table, was
     *     removed while an external shuffle service serves its files, or receive memory was refused), since
     *     it started
     * @param peersForgotten peers whose cached node, table and metadata were dropped after a failed fetch
     * @param orphanShufflesDropped shuffles dropped because the driver no longer knew them
     * @param metadataReadsAgain metadata or offsets windows READ again because what landed did not make sense
     * @param poolExhaustedTasks reduce tasks that fetched blocks through Spark's path because the receive pool
     *     stayed at its cap past its acquire timeout
     * @param nodeFailed 1 while the current node has failed (withdrawn, not yet replaced), else 0
     * @param nodeRestarts nodes started after one failed, in this executor's life
     * @param hostLocalBlocks blocks of other executors on this host its reducers read from their disk
     *     ({@code spark.shuffle.readHostLocalDisk}, as Spark's reader does) instead of READing them
     * @param buffersWithheld receive buffers its reducers kept out of the pool because posting their READs failed
     *     part-way (each back once its READs land; never when some were not accepted)
     * @param provider the provider its node runs: {@code verbs} or {@code tcp}
     * @param device the RDMA device of a verbs node; empty for tcp
     */
    public record ExecutorStats(String executorId, NodeStats node, BufferPoolStats pool, List<Integer> shuffles,
                                long registeredOutputBytes, long controlBytesRead, long unregisteredOutputs,
                                long unregisteredOutputBytes, long receiveMemoryFallbacks, long blocksViaSpark,
                                long peersForgotten, long orphanShufflesDropped, long metadataReadsAgain,
                                long poolExhaustedTasks, long nodeFailed, long nodeRestarts, long hostLocalBlocks,
                                long buffersWithheld, String provider, String device)
            implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
    }

    private final boolean isDriver;
    private final RdmaShuffleConf conf;
    private final SortShuffleManager sort;
    /** Why the driver registers every shuffle with Spark's own handle, or null. */
    private final String driverFallback;
    private volatile ExecutorRuntime runtime;
    private volatile String runtimeFailure;
    /** Runtimes started after one whose node failed (written under this). */
    private volatile int nodeRestarts;
    private volatile NodeDirectory.Endpoint directory;
    private final RdmaShuffleSource source;
    private volatile boolean sourceRegistered;
    private volatile boolean stopped;

    public RdmaShuffleManager(SparkConf sparkConf, boolean isDriver) {
        this.isDriver = isDriver;
        this.conf = SparkRdmaConf.from(sparkConf);
        this.sort = new SortShuffleManager(sparkConf);
        String why = null;
        if (isDriver) {
            if (conf.fallback() == RdmaShuffleConf.Fallback.ALWAYS) {
                why = RdmaShuffleConf.FALLBACK.name() + "=always";
            } else {
                why = unencryptedReads(sparkConf);
                if (why == null) {
                    why = RdmaTransport.unavailable(conf).orElse(null);
                }
                if (why != null && conf.fallback() == RdmaShuffleConf.Fallback.NEVER) {
                    throw new IllegalStateException("rdma-shuffle cannot start its transport and "
                            + RdmaShuffleConf.FALLBACK.name() + "=never: " + why);
                }
            }
            if (why != null) {
                LOG.warn("rdma-shuffle: every shuffle of this application uses Spark's sort shuffle: {}", why);
            }
        }
        if (!isDriver && conf.fallback() == RdmaShuffleConf.Fallback.NEVER) {
            RdmaTransport.unavailable(conf).ifPresent(reason -> {
                throw new IllegalStateException(strict("rdma-shuffle cannot start its transport on this executor: "
                        + reason));
            });
        }
        this.driverFallback = why;
        this.source = new RdmaShuffleSource(this::executorStats,
                isDriver ? () -> directory == null ? 0 : directory.size() : null, why == null ? 0 : 1);
        registerSource();
        if (conf.startEarly() && why == null && conf.fallback() != RdmaShuffleConf.Fallback.ALWAYS
                && unencryptedReads(sparkConf) == null) {
            startEarly(isDriver && !isLocalMode(sparkConf));
        }
    }

    /**
     * {@code why}, plus what {@code fallback=never} means and which keys to change: the strict posture
     * ({@code provider=verbs} with {@code fallback=never}) fails an executor that cannot run its provider.
     */
    private String strict(String why) {
        return why + " (" + RdmaShuffleConf.FALLBACK.name() + "=never: an executor whose transport cannot start "
                + "fails; fix the host" + (conf.provider() == RdmaShuffleConf.Provider.VERBS ? " (docs/verbs.md)" : "")
                + ", or set " + RdmaShuffleConf.FALLBACK.name() + "=auto to shuffle through Spark's path there"
                + (conf.provider() == RdmaShuffleConf.Provider.VERBS ? ", or " + RdmaShuffleConf.PROVIDER.name()
                        + "=auto to use tcp where verbs cannot run" : "") + ")";
    }

    /** How long the early start waits for this process's SparkEnv, BlockManager and the driver's directory. */
    private static final long EARLY_START_WAIT_NANOS = TimeUnit.SECONDS.toNanos(60);
    private static final long EARLY_START_POLL_MS = 20;
    private static final long EARLY_START_RETRY_MS = 250;
    /** Looks for the driver's directory before the early start leaves the start to the first task (10 s). */
    private static final int EARLY_START_DIRECTORY_ATTEMPTS = 40;

    /**
     * Starts, on a thread of its own, what the first shuffle would otherwise start on a task thread: on an
     * executor (and the driver in local mode) the runtime — node, pool, directory registration — and on the
     * driver the node directory, as soon as this process's SparkEnv and BlockManager are ready (Spark builds
     * the manager before both). An early start that fails records nothing: the first task that needs the
     * runtime starts it as before and meets the failure the fallback policy decides on (one WARN and Spark's
     * path, or the task fails with {@code never}).
     *
     * @param directoryOnly a driver that runs no tasks: start the directory only
     */
    private void startEarly(boolean directoryOnly) {
        Thread t = new Thread(() -> {
            try {
                startWhenReady(directoryOnly);
            } catch (Throwable e) { // nothing may escape; the lazy start decides
                LOG.debug("rdma-shuffle: early start gave up", e);
            }
        }, "rdma-shuffle-start");
        t.setDaemon(true);
        t.start();
    }

    private void startWhenReady(boolean directoryOnly) throws InterruptedException {
        if (!isDriver && RdmaTransport.unavailable(conf).isPresent()) {
            return; // the driver fell back for it too; and if not, the first task says why
        }
        long deadline = System.nanoTime() + EARLY_START_WAIT_NANOS;
        int directoryAttempts = 0;
        while (!stopped && System.nanoTime() < deadline) {
            SparkEnv env = SparkEnv.get();
            boolean ready = env != null && env.rpcEnv() != null
                    && (!isDriver || SparkInterop.sparkContextActive())
                    && (directoryOnly || env.blockManager() != null && env.blockManager().blockManagerId() != null);
            if (!ready) {
                Thread.sleep(EARLY_START_POLL_MS);
                continue;
            }
            registerSource();
            if (directoryOnly) {
                ensureDirectory();
                return;
            }
            try {
                startRuntime(env);
                return;
            } catch (Exception e) {
                if (isDriver || !directoryNotUpYet(e) || ++directoryAttempts >= EARLY_START_DIRECTORY_ATTEMPTS) {
                    if (conf.fallback() == RdmaShuffleConf.Fallback.NEVER && !directoryNotUpYet(e)) {
                        LOG.error("{}; every task of this executor that shuffles will fail",
                                strict("rdma-shuffle cannot start its transport: " + e.getMessage()), e);
                    } else {
                        LOG.debug("rdma-shuffle: early start failed; the first task that needs it tries again", e);
                    }
                    return;
                }
                // an executor up before the driver's directory: ask again shortly
            }
            Thread.sleep(EARLY_START_RETRY_MS);
        }
    }

    /** Whether {@code e} says the driver's node directory endpoint does not exist (yet). */
    private static boolean directoryNotUpYet(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (String.valueOf(t.getMessage()).contains(NodeDirectory.ENDPOINT_NAME)) {
                return true;
            }
        }
        return false;
    }

    private static boolean isLocalMode(SparkConf sparkConf) {
        String master = sparkConf.get("spark.master", "");
        return master.equals("local") || master.startsWith("local[");
    }

    /**
     * The early start: the runtime, unless it exists, failed already or the manager stopped. A failure
     * propagates and is recorded nowhere.
     */
    private void startRuntime(SparkEnv env) throws IOException {
        synchronized (this) {
            if (stopped || runtime != null || runtimeFailure != null) {
                return;
            }
            ensureDirectory();
            runtime = new ExecutorRuntime(conf, env, this::dropOrphanShuffle);
        }
    }

    /**
     * Registers this manager's metrics in Spark's MetricsSystem, once, as soon as this process's SparkEnv
     * exists and knows the application's id (which names the metrics): on executors when the manager is
     * built, on the driver (built before the id is set) at its first shuffle.
     */
    private void registerSource() {
        if (sourceRegistered) {
            return;
        }
        SparkEnv env = SparkEnv.get();
        if (env == null || env.metricsSystem() == null || !env.conf().contains("spark.app.id")) {
            return;
        }
        synchronized (this) {
            if (!sourceRegistered) {
                sourceRegistered = true;
                try {
                    env.metricsSystem().registerSource(source);
                } catch (RuntimeException e) {
                    LOG.warn("rdma-shuffle: cannot register its metrics source: {}", e.toString());
                }
            }
        }
    }

    /**
     * Why READs would move shuffle bytes in the clear although the application asks Spark to encrypt
     * them in transit, or null. One-sided READs cannot encrypt; with {@code spark.io.encryption.enabled}
     * the shuffle files are encrypted, and so is every READ of them.
     */
    static String unencryptedReads(SparkConf sparkConf) {
        if (sparkConf.getBoolean("spark.io.encryption.enabled", false)) {
            return null;
        }
        for (String key : new String[] {"spark.network.crypto.enabled", "spark.ssl.rpc.enabled"}) {
            if (sparkConf.getBoolean(key, false)) {
                return key + "=true asks Spark to encrypt shuffle bytes in transit, which one-sided READs cannot "
                        + "do; set spark.io.encryption.enabled=true (shuffle files, and so every READ of them, are "
                        + "then encrypted) to shuffle with rdma-shuffle";
            }
        }
        return null;
    }

    /** On the driver, starts the node directory executors register with, unless it runs (idempotent). */
    void ensureDirectory() {
        if (isDriver && directory == null) {
            synchronized (this) {
                if (directory == null) {
                    SparkEnv env = SparkEnv.get();
                    NodeDirectory.Endpoint d = NodeDirectory.Endpoint.start(env.rpcEnv(),
                            SparkInterop.shuffleKnown(env), expectedExecutors(env.conf()));
                    SparkInterop.onExecutorRemoved(d::executorRemoved);
                    directory = d;
                }
            }
        }
    }

    /**
     * How many executors the application asks for, when that is known up front: {@code N} of
     * {@code local-cluster[N,...]}, else {@code spark.executor.instances} without dynamic allocation; 0 when it
     * cannot tell (the transport summary then waits for a quiet spell).
     */
    static int expectedExecutors(SparkConf sparkConf) {
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("local-cluster\\[\\s*(\\d+)\\s*,")
                .matcher(sparkConf.get("spark.master", ""));
        if (m.lookingAt()) {
            return Integer.parseInt(m.group(1));
        }
        if (isLocalMode(sparkConf)) {
            return 1; // the driver runs the tasks
        }
        if (sparkConf.getBoolean("spark.dynamicAllocation.enabled", false)) {
            return 0;
        }
        try {
            return Math.max(0, sparkConf.getInt("spark.executor.instances", 0));
        } catch (NumberFormatException e) {
            return 0;
        }
    }

    /**
     * On the driver: which transport the executors known now run, in one line (see
     * {@link NodeDirectory.Endpoint#transportSummary()}); empty before the directory started (and elsewhere).
     */
    public Optional<String> transportSummary() {
        NodeDirectory.Endpoint d = directory;
        return d == null ? Optional.empty() : Optional.of(d.transportSummary());
    }

    /** Why this executor's transport could not start (it reads and writes through Spark's path), or null. */
    String runtimeFailure() {
        return runtimeFailure;
    }

    /** The executor's runtime if it has started, else null; never starts it (for error paths). */
    ExecutorRuntime startedRuntime() {
        return runtime;
    }

    /**
     * This executor's runtime, started on first use; null when its transport could not start and the
     * fallback policy is {@code auto} (logged once, with the reason).
     *
     * @throws IllegalStateException when the transport cannot start and the policy is {@code never}
     */
    ExecutorRuntime runtime() {
        ExecutorRuntime rt = runtime;
        if (rt != null) {
            return rt.failed() ? replaceFailed(rt) : rt;
        }
        if (runtimeFailure != null) {
            return null;
        }
        registerSource();
        String failed = null;
        synchronized (this) {
            if (runtime == null && runtimeFailure == null) {
                if (stopped) {
                    throw new IllegalStateException("rdma-shuffle is stopped");
                }
                ensureDirectory();
                try {
                    runtime = new ExecutorRuntime(conf, SparkEnv.get(), this::dropOrphanShuffle);
                } catch (Exception e) {
                    String why = "rdma-shuffle cannot start its transport: " + e.getMessage();
                    if (conf.fallback() == RdmaShuffleConf.Fallback.NEVER) {
                        throw new IllegalStateException(strict(why), e);
                    }
                    runtimeFailure = why;
                    failed = e.getMessage();
                    LOG.warn("{}; this executor serves and reads shuffle blocks with Spark's sort shuffle instead "
                            + "({}=auto)", why, RdmaShuffleConf.FALLBACK.name(), e);
                }
            }
            if (failed == null) {
                return runtime;
            }
        }
        reportNoTransport(failed); // an RPC: not under the lock other tasks wait on
        return null;
    }

    /**
     * Tells the driver's summary that this executor runs no transport, and why (best effort: the directory
     * may be what failed).
     */
    private void reportNoTransport(String why) {
        SparkEnv env = SparkEnv.get();
        try {
            new NodeDirectory.Client(env.conf(), env.rpcEnv()).reportTransport(env.executorId(),
                    new org.rdmashuffle.transport.TransportChoice(
                            org.rdmashuffle.shuffle.core.directory.TransportSummary.NONE, "", "",
                            "Spark's path: " + why, true));
        } catch (RuntimeException e) {
            LOG.debug("rdma-shuffle: cannot tell the driver this executor runs no transport", e);
        }
    }

    /**
     * A runtime whose node failed: withdrawn at once (by its maintenance thread), and — once none of this
     * executor's tasks holds anything of it — closed and replaced by a new one, at most
     * {@code nodeRestarts} times in the executor's life. Until then (and past the count, for good) the
     * caller gets null: Spark's path, blaming nobody.
     */
    private ExecutorRuntime replaceFailed(ExecutorRuntime rt) {
        rt.nodeFailureSeen();
        if (!rt.retiredAndUnused()) {
            return null;
        }
        synchronized (this) {
            if (runtime != rt) {
                return runtime; // another task replaced it meanwhile (or the manager stopped)
            }
            runtime = null;
            rt.close();
            if (stopped) {
                return null;
            }
            if (nodeRestarts >= conf.nodeRestarts()) {
                runtimeFailure = "rdma-shuffle's node failed (" + rt.failureReason() + ") and "
                        + RdmaShuffleConf.NODE_RESTARTS.name() + "=" + conf.nodeRestarts() + " restarts are used up";
                LOG.warn("{}; this executor reads and writes through Spark's sort shuffle from now on", runtimeFailure);
                return null;
            }
            nodeRestarts++;
            try {
                runtime = new ExecutorRuntime(conf, SparkEnv.get(), this::dropOrphanShuffle);
                LOG.warn("rdma-shuffle: started a new node after the last one failed ({} of {} restarts); outputs "
                        + "registered with the old node stay on Spark's path", nodeRestarts, conf.nodeRestarts());
            } catch (Exception e) {
                runtimeFailure = "rdma-shuffle cannot start a new node after its node failed: " + e.getMessage();
                LOG.warn("{}; this executor reads and writes through Spark's sort shuffle from now on",
                        runtimeFailure, e);
            }
            return runtime;
        }
    }

    /** Why the driver uses Spark's sort shuffle for every shuffle, if it does. */
    public Optional<String> driverFallback() {
        return Optional.ofNullable(driverFallback);
    }

    /** This executor's counters; empty before its runtime started or when it could not. */
    public Optional<ExecutorStats> executorStats() {
        ExecutorRuntime rt = runtime;
        return rt == null ? Optional.empty() : Optional.of(rt.stats(nodeRestarts));
    }

    RdmaShuffleConf conf() {
        return conf;
    }

    File dataFile(int shuffleId, long mapId) {
        return ((IndexShuffleBlockResolver) sort.shuffleBlockResolver()).getDataFile(shuffleId, mapId);
    }

    @Override
    public <K, V, C> ShuffleHandle registerShuffle(int shuffleId, ShuffleDependency<K, V, C> dependency) {
        ShuffleHandle sortHandle = sort.registerShuffle(shuffleId, dependency);
        registerSource();
        if (driverFallback != null) {
            return sortHandle;
        }
        ensureDirectory();
        return new RdmaShuffleHandle(sortHandle, dependency.rdd().getNumPartitions());
    }

    @Override
    public <K, V> ShuffleWriter<K, V> getWriter(ShuffleHandle handle, long mapId, TaskContext context,
                                                ShuffleWriteMetricsReporter metrics) {
        if (!(handle instanceof RdmaShuffleHandle h)) {
            return sort.getWriter(handle, mapId, context, metrics);
        }
        return new RdmaShuffleWriter<>(sort.getWriter(h.sortHandle(), mapId, context, metrics), this, h, mapId,
                context.partitionId());
    }

    @Override
    public <K, C> ShuffleReader<K, C> getReader(ShuffleHandle handle, int startMapIndex, int endMapIndex,
                                                int startPartition, int endPartition, TaskContext context,
                                                ShuffleReadMetricsReporter metrics) {
        if (!(handle instanceof RdmaShuffleHandle h)) {
            return sort.getReader(handle, startMapIndex, endMapIndex, startPartition, endPartition, context, metrics);
        }
        return new RdmaShuffleReader<>(this, h, startMapIndex, endMapIndex, startPartition, endPartition, context,
                metrics);
    }

    /** Spark's own reader for an rdma handle: the fallback when the transport cannot serve a read. */
    <K, C> ShuffleReader<K, C> sortReader(RdmaShuffleHandle h, int startMapIndex, int endMapIndex,
                                          int startPartition, int endPartition, TaskContext context,
                                          ShuffleReadMetricsReporter metrics) {
        return sort.getReader(h.sortHandle(), startMapIndex, endMapIndex, startPartition, endPartition, context,
                metrics);
    }

    /**
     * Drops a shuffle the driver no longer knows, on this executor, as Spark's cleanup message would have:
     * this executor's cached map statuses, its registrations and tables, and its files.
     */
    private void dropOrphanShuffle(int shuffleId) {
        SparkEnv env = SparkEnv.get();
        if (env != null && !isDriver) {
            env.mapOutputTracker().unregisterShuffle(shuffleId);
        }
        unregisterShuffle(shuffleId);
    }

    @Override
    public boolean unregisterShuffle(int shuffleId) {
        ExecutorRuntime rt = runtime;
        if (rt != null) {
            rt.unregisterShuffle(shuffleId); // deregister and unmap before Spark deletes the files
        }
        return sort.unregisterShuffle(shuffleId);
    }

    @Override
    public ShuffleBlockResolver shuffleBlockResolver() {
        return sort.shuffleBlockResolver();
    }

    @Override
    public void stop() {
        synchronized (this) {
            stopped = true;
            SparkEnv env = SparkEnv.get();
            if (sourceRegistered && env != null && env.metricsSystem() != null) {
                env.metricsSystem().removeSource(source);
            }
            if (runtime != null) {
                runtime.close();
                runtime = null;
            }
            if (directory != null) {
                directory.stop(); // logs the transport summary over the application
            }
        }
        sort.stop();
        LOG.debug("rdma-shuffle stopped");
    }
}
