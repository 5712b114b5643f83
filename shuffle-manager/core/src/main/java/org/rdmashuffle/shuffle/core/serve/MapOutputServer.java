package org.rdmashuffle.shuffle.core.serve;

import java.io.File;
import java.io.IOException;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.Executor;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.IntFunction;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.directory.PeerDirectory;
import org.rdmashuffle.shuffle.core.format.ControlProtocol;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.TransportChoice;
import org.rdmashuffle.transport.RegionDescriptor;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The serving side of one transport node: the node and its receive-buffer pool, its entry in a
 * {@link PeerDirectory}, the output table of each shuffle with the cap on registered output bytes, and
 * publishing a committed map output (registered for READs, or marked as left to the engine's own path). It
 * knows no engine: an engine's serving process owns one (an executor, a NodeManager's auxiliary service).
 *
 * <p>Its maintenance thread looks at the node's health every second and withdraws a node that failed
 * ({@link #retire}); the owner may run its own periodic work on that thread ({@link #scheduleMaintenance}).
 *
 * <p>Threads: {@link #publish} runs on map task threads, several at once (the cap reserves without a lock
 * held while a file is mapped and registered); the node's transport threads answer peers' table lookups
 * from {@link #localTable} (never blocking); {@link #checkHealth} and {@link #retire} run on the maintenance
 * thread; {@link #close} on the thread stopping the owner. Nobody is blamed here: a peer that cannot READ
 * from this node finds out on its own side, and a node that failed is withdrawn so that nobody blames it.
 *
 * <p>Opened in this order: node, pool, directory entry, maintenance thread; closed in reverse.
 */
public final class MapOutputServer implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(MapOutputServer.class);
    /** How often the maintenance thread looks at the node's health. */
    private static final long HEALTH_CHECK_MS = 1000;
    private static final int MAX_UNREGISTERED_REMEMBERED = 100_000;

    private final RdmaShuffleConf conf;
    private final PeerDirectory directory;
    private final String id;
    private final IntFunction<String> realmOfShuffle;
    private final RdmaNode node;
    private final TransportChoice transportChoice;
    private final BufferPool pool;
    /**
     * This node's incarnation in the directory: random, so a node started again after one failed is told
     * apart from it even at the same address (a fixed port).
     */
    private final long incarnation = new java.security.SecureRandom().nextLong();
    private final Map<Integer, RegisteredOutputTable> tables = new ConcurrentHashMap<>();
    /** Shuffles unregistered here (the most recent ones), so late map tasks cannot recreate their tables. */
    private final ConcurrentSkipListSet<Integer> unregistered = new ConcurrentSkipListSet<>();
    /** Shuffles whose output table could not be registered here. */
    private final Set<Integer> noTable = ConcurrentHashMap.newKeySet();
    /** Tables unregistered whose outputs are being deregistered elsewhere ({@link #unregisterShuffle(int, Executor)}). */
    private final Set<RegisteredOutputTable> closing = ConcurrentHashMap.newKeySet();
    private final RegistrationCap cap;
    /** Whether output tables' own bytes count against the cap with the outputs ({@link #table}). */
    private final boolean tablesCharged;
    private final LongAdder unregisteredOutputs = new LongAdder();
    private final LongAdder unregisteredOutputBytes = new LongAdder();
    private final AtomicBoolean warnedUnregistered = new AtomicBoolean();
    private final ScheduledExecutorService maintenance;
    /** Set once this node failed and was withdrawn ({@link #retire}); never cleared. */
    private final AtomicBoolean retired = new AtomicBoolean();
    /** Set once {@link #retire} closed the node: only then may the owner close this server and start anew. */
    private volatile boolean retireDone;
    private volatile String failureReason;

    /**
     * Opens the node on {@code host}, its pool, and registers the node in {@code directory} as {@code id};
     * whatever was opened is closed again when a later step fails.
     *
     * @param secret the shared secret peers authenticate with, or null for none
     */
    public MapOutputServer(RdmaShuffleConf conf, String host, byte[] secret, PeerDirectory directory, String id)
            throws IOException {
        this(conf, new NodeOptions(host, host, ControlHandler.NONE, secret), s -> ControlProtocol.tables(s::localTable), directory, id,
                shuffleId -> null);
    }

    /**
     * A server whose node answers control messages with {@code handler} (given this server, so that it can
     * look up and publish outputs; called once, before the node starts), and whose output table of each
     * shuffle only connections of {@code realmOfShuffle}'s realm may READ (null: any peer) — a MapReduce
     * NodeManager serves many jobs, each its own realm.
     *
     * @param options the node's hosts and authentication; its control handler is replaced by {@code handler}'s
     */
    public MapOutputServer(RdmaShuffleConf conf, NodeOptions options,
                           java.util.function.Function<MapOutputServer, ControlHandler> handler,
                           PeerDirectory directory, String id, IntFunction<String> realmOfShuffle) throws IOException {
        this(conf, options, handler, directory, id, realmOfShuffle, false);
    }

    /**
     * As above; with {@code tablesCharged}, output tables' own bytes ({@link RegisteredOutputTable#tableBytes()})
     * count against {@code maxRegisteredOutputBytes} with the outputs: a table that would pass it is not created
     * ({@link #table} throws), and outputs see the tables' bytes as registered. For a server whose tables are sized
     * by what peers claim (a MapReduce NodeManager: a reducer says how many maps its job has).
     */
    public MapOutputServer(RdmaShuffleConf conf, NodeOptions options,
                           java.util.function.Function<MapOutputServer, ControlHandler> handler,
                           PeerDirectory directory, String id, IntFunction<String> realmOfShuffle,
                           boolean tablesCharged) throws IOException {
        this.conf = conf;
        this.tablesCharged = tablesCharged;
        this.directory = directory;
        this.id = id;
        this.realmOfShuffle = realmOfShuffle;
        options = options.withControlHandler(handler.apply(this));
        RdmaTransport.Opened opened = RdmaTransport.openChosen(conf, options);
        this.node = opened.node();
        this.transportChoice = opened.choice();
        BufferPool p = null;
        try {
            p = new BufferPool(BufferPoolOptions.from(conf), node.sinkRegistrar());
            directory.register(id, node.localAddress(), incarnation);
        } catch (RuntimeException e) {
            if (p != null) {
                p.close(); // reverse order of opening: the pool's registrations before the node that holds them
            }
            node.close();
            throw e;
        }
        this.pool = p;
        this.cap = new RegistrationCap(conf.maxRegisteredOutputBytes(),
                tablesCharged ? () -> registeredOutputBytes() + tableBytes() : this::registeredOutputBytes);
        String name = "rdma-shuffle-maintenance-" + id;
        maintenance = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            return t;
        });
        maintenance.scheduleWithFixedDelay(this::checkHealth, HEALTH_CHECK_MS, HEALTH_CHECK_MS, TimeUnit.MILLISECONDS);
    }

    public RdmaNode node() {
        return node;
    }

    /** Which provider this server's node runs and why. */
    public TransportChoice transportChoice() {
        return transportChoice;
    }

    public BufferPool pool() {
        return pool;
    }

    public long incarnation() {
        return incarnation;
    }

    /**
     * Runs {@code task} on the maintenance thread every {@code everyMs}, first after {@code everyMs}. A task
     * that throws is never run again: catch at its boundary.
     */
    public void scheduleMaintenance(Runnable task, long everyMs) {
        maintenance.scheduleWithFixedDelay(task, everyMs, everyMs, TimeUnit.MILLISECONDS);
    }

    /**
     * Whether this node can no longer serve or READ: it failed (a transport loop or the device could not go
     * on), or it was withdrawn after failing. One volatile read or two: cheap on task paths.
     */
    public boolean failed() {
        return retired.get() || node.failure() != null;
    }

    /** Why {@link #failed()}, for log lines and errors. */
    public String failureReason() {
        String why = failureReason;
        if (why != null) {
            return why;
        }
        Throwable f = node.failure();
        return f == null ? "its node was closed" : String.valueOf(f);
    }

    /**
     * A task found the node failed: the maintenance thread withdraws it now rather than at its next tick
     * (the task itself goes on through the engine's path and does not wait for that).
     */
    public void nodeFailureSeen() {
        if (!retired.get()) {
            try {
                maintenance.execute(this::checkHealth);
            } catch (RejectedExecutionException e) {
                LOG.debug("maintenance stopped: the server is closing", e);
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
            LOG.warn("rdma-shuffle: checking process {}'s node failed", id, t);
        }
    }

    /**
     * Withdraws a node that failed, so that nobody is blamed for it: first from the directory (readers
     * elsewhere then take this node's blocks through the engine's path — those whose READs to it fail ask
     * the directory again before blaming it), then the node is closed, so peers' connections are refused at
     * once instead of timing out. The owner's own reads and writes take the engine's path from the moment
     * the failure is seen ({@link #failed()}); it starts a new server once nothing uses this one. On the
     * maintenance thread; idempotent.
     */
    public void retire() {
        if (!retired.compareAndSet(false, true)) {
            return;
        }
        Throwable f = node.failure();
        failureReason = "its RDMA node " + node.localAddress() + " failed: " + (f == null ? "closed" : f.toString());
        LOG.warn("rdma-shuffle: process {}: {}. Its node leaves the directory and closes; this process reads and writes "
                + "through the engine's own shuffle path until a new node starts (when its tasks let go of the "
                + "old one); readers elsewhere take its blocks through the engine's path, blaming nobody",
                id, failureReason, f);
        try {
            directory.forget(id);
        } catch (Exception e) {
            LOG.warn("rdma-shuffle: cannot withdraw process {}'s failed node from the directory ({}); "
                    + "readers whose READs to it fail will blame it", id, e.toString());
        }
        try {
            node.close();
        } catch (RuntimeException e) {
            LOG.warn("rdma-shuffle: closing process {}'s failed node", id, e);
        }
        retireDone = true;
    }

    /**
     * Whether this server was withdrawn after its node failed and no task holds anything of it any more (no
     * receive buffer in use): then it can be closed and a new one started.
     */
    public boolean retiredAndUnused() {
        return retireDone && pool.stats().inUseBuffers() == 0;
    }

    /** The descriptor peers READ {@code shuffleId}'s table through, or null; on transport threads. */
    private RegionDescriptor localTable(int shuffleId) {
        if (noTable.contains(shuffleId)) {
            return null; // readers take every output of it through the engine's path
        }
        RegisteredOutputTable t = tables.get(shuffleId);
        return t == null ? null : t.descriptor();
    }

    /**
     * The output table of {@code shuffleId}, created on first use; null when the shuffle was unregistered
     * here already (a map task still running when the engine cleaned its shuffle — a cancelled stage, a
     * zombie attempt — must not bring back a table nobody will remove).
     *
     * @throws IOException when the table cannot be registered, or (tables charged) its bytes would pass the cap
     */
    public RegisteredOutputTable table(int shuffleId, int numMaps) throws IOException {
        RegisteredOutputTable t = tables.get(shuffleId);
        if (t != null) {
            return t;
        }
        synchronized (tables) {
            if (unregistered.contains(shuffleId)) {
                return null;
            }
            t = tables.get(shuffleId);
            if (t == null) {
                long bytes = tablesCharged ? RegisteredOutputTable.tableBytes(numMaps) : 0;
                if (!cap.reserve(bytes)) {
                    throw new IOException("its output table's " + bytes + " bytes would pass "
                            + conf.keyName(RdmaShuffleConf.MAX_REGISTERED_OUTPUT_BYTES) + " (" + cap.capBytes()
                            + " bytes)");
                }
                try {
                    t = new RegisteredOutputTable(node, shuffleId, numMaps, realmOfShuffle.apply(shuffleId));
                    tables.put(shuffleId, t);
                } finally {
                    cap.release(bytes); // counted as a table from now on
                }
            }
            return t;
        }
    }

    /**
     * Registers a committed map output and publishes it in its shuffle's output table. Past
     * {@code maxRegisteredOutputBytes}, or when registering fails (locked-memory or mapping limits of
     * the host), the output is published as left to the engine's own path instead — one WARN per server,
     * counted in {@link #unregisteredOutputs()} — unless {@code fallback=never}, which fails the map task.
     *
     * @param offsets the partitions' offsets in {@code data}, the last one its length
     * @return whether the output is in its shuffle's table now (registered, or marked as left to the engine's
     *     path); false when the shuffle was unregistered here, its table could not be registered, or the node failed
     */
    public boolean publish(int shuffleId, int numMaps, int mapIndex, long mapId, File data, long[] offsets) {
        return publish(shuffleId, numMaps, mapIndex, mapId, data.toString(), offsets,
                (layout, realm) -> RegisteredMapOutput.register(node, data.toPath(), layout, realm));
    }

    /**
     * As {@link #publish(int, int, int, long, File, long[])}, from a data file the caller opened and checked: the
     * bytes registered are that file's, whatever its path names by now (an engine whose files others can replace
     * opens them so that the check and the open cannot race). The caller closes {@code data} afterwards.
     *
     * @param name the data file's name in messages
     */
    public boolean publish(int shuffleId, int numMaps, int mapIndex, long mapId, java.nio.channels.FileChannel data,
                           String name, long[] offsets) {
        return publish(shuffleId, numMaps, mapIndex, mapId, name, offsets,
                (layout, realm) -> RegisteredMapOutput.register(node, data, name, layout, realm));
    }

    /** Maps and registers a data file's regions as {@code layout} says, READable by {@code realm}'s connections. */
    private interface DataRegistrar {
        RegisteredMapOutput register(MapOutputLayout layout, String realm) throws IOException;
    }

    private boolean publish(int shuffleId, int numMaps, int mapIndex, long mapId, String data, long[] offsets,
                            DataRegistrar registrar) {
        long bytes = offsets[offsets.length - 1];
        RegisteredOutputTable table;
        if (failed()) {
            // The node is withdrawn (or about to be): readers take this server's outputs through the engine's path.
            nodeFailureSeen();
            unregisteredOutputs.increment();
            unregisteredOutputBytes.add(bytes);
            LOG.debug("map output {} of shuffle {} is not registered: {}", mapIndex, shuffleId, failureReason());
            return false;
        }
        if (noTable.contains(shuffleId)) {
            leftToEngine(shuffleId, mapIndex, bytes, "its output table could not be registered", null);
            return false;
        }
        try {
            table = table(shuffleId, numMaps);
            if (table == null) {
                LOG.debug("map output {} of shuffle {} committed after the shuffle was unregistered: not registered",
                        mapIndex, shuffleId);
                return false;
            }
        } catch (IOException | RuntimeException e) {
            // No table to publish in: every output of the shuffle here — also later ones, or readers would
            // find this one's slot empty — is read through the engine's path.
            noTable.add(shuffleId);
            leftToEngine(shuffleId, mapIndex, bytes, "its output table cannot be registered: " + e.getMessage(), e);
            return false;
        }
        // Concurrent map tasks: the check and the registration are one step for the cap (a reservation), but
        // no lock is held while the file is mapped and registered, so commits do not wait for each other.
        if (!cap.reserve(bytes)) {
            leftToEngine(shuffleId, mapIndex, bytes, "registering its " + bytes + " bytes would pass "
                    + conf.keyName(RdmaShuffleConf.MAX_REGISTERED_OUTPUT_BYTES) + " (" + cap.capBytes() + " bytes)",
                    null);
            return publishUnregistered(table, mapIndex, mapId);
        }
        try {
            return register(table, shuffleId, mapIndex, mapId, data, offsets, registrar);
        } finally {
            cap.release(bytes);
        }
    }

    /**
     * Marks an output left to the engine's path in its table; a table closed meanwhile (node failed, shuffle
     * unregistered) is left alone.
     *
     * @return whether it was marked
     */
    private boolean publishUnregistered(RegisteredOutputTable table, int mapIndex, long mapId) {
        try {
            table.publishUnregistered(mapIndex, mapId);
            return true;
        } catch (RuntimeException e) {
            LOG.debug("cannot mark map output {} as left to the engine's path in its table", mapIndex, e);
            return false;
        }
    }

    private boolean register(RegisteredOutputTable table, int shuffleId, int mapIndex, long mapId, String data,
                             long[] offsets, DataRegistrar registrar) {
        try {
            MapOutputLayout layout = new MapOutputLayout(offsets, conf.maxRegionSizeBytes());
            table.publish(mapIndex, mapId, registrar.register(layout, table.realm()));
            return true;
        } catch (IOException | RuntimeException e) {
            if (failed()) { // the node failed meanwhile: withdrawn, readers take the engine's path for every output
                nodeFailureSeen();
                return false;
            }
            leftToEngine(shuffleId, mapIndex, offsets[offsets.length - 1], "it cannot be registered (" + data
                    + "): " + e.getMessage(), e);
            return publishUnregistered(table, mapIndex, mapId);
        }
    }

    private void leftToEngine(int shuffleId, int mapIndex, long bytes, String why, Exception cause) {
        String what = "map output " + mapIndex + " of shuffle " + shuffleId;
        if (conf.fallback() == RdmaShuffleConf.Fallback.NEVER) {
            throw new IllegalStateException("cannot serve " + what + " for RDMA reads (fallback=never): " + why,
                    withoutErrors(cause));
        }
        unregisteredOutputs.increment();
        unregisteredOutputBytes.add(bytes);
        if (warnedUnregistered.compareAndSet(false, true)) {
            LOG.warn("{} is left to the engine's own shuffle path: {}. Reducers fetch such outputs as the engine "
                    + "does; later ones are logged at DEBUG and counted in the process's stats", what, why, cause);
        } else {
            LOG.debug("{} is left to the engine's own shuffle path: {}", what, why, cause);
        }
    }

    /**
     * {@code cause}, or — when an {@link Error} is in its chain (a failed mapping carries the
     * {@code OutOfMemoryError} of {@code vm.max_map_count}) — an exception with the chain's messages
     * and none of its errors: an engine may end a process whose task failed with an error anywhere in
     * the chain (Spark does, for one), and a mapping limit is no reason to lose the process's other outputs.
     */
    public static Throwable withoutErrors(Throwable cause) {
        StringBuilder chain = new StringBuilder();
        boolean error = false;
        for (Throwable t = cause; t != null; t = t.getCause()) {
            error |= t instanceof Error;
            chain.append(chain.length() == 0 ? "" : "; caused by ").append(t);
        }
        return error ? new IOException(chain.toString()) : cause;
    }

    /**
     * The data regions of {@code shuffleId}'s map index {@code mapIndex} while attempt {@code mapId} is published
     * there registered, else null ({@link RegisteredOutputTable#dataRegions}); for a reply that tells a reader where
     * the bytes are.
     */
    public RegionDescriptor[] dataRegions(int shuffleId, int mapIndex, long mapId) {
        RegisteredOutputTable t = tables.get(shuffleId);
        return t == null ? null : t.dataRegions(mapIndex, mapId);
    }

    /** Bytes of map outputs registered here now. */
    public long registeredOutputBytes() {
        long sum = 0;
        for (RegisteredOutputTable t : tables.values()) {
            sum += t.registeredOutputBytes();
        }
        for (RegisteredOutputTable t : closing) {
            sum += t.registeredOutputBytes();
        }
        return sum;
    }

    /** Bytes of the output tables here now (their own slots, not the outputs), those being closed too. */
    public long tableBytes() {
        long sum = 0;
        for (RegisteredOutputTable t : tables.values()) {
            sum += t.tableBytes();
        }
        for (RegisteredOutputTable t : closing) {
            sum += t.tableBytes();
        }
        return sum;
    }

    /** Map outputs left to the engine's path (not registered), and their bytes. */
    public long unregisteredOutputs() {
        return unregisteredOutputs.sum();
    }

    public long unregisteredOutputBytes() {
        return unregisteredOutputBytes.sum();
    }

    /** The shuffles with an output table here now. */
    public Set<Integer> shufflesWithTable() {
        return tables.keySet();
    }

    /** Whether {@code shuffleId} was unregistered here (among the most recent ones). */
    public boolean wasUnregistered(int shuffleId) {
        return unregistered.contains(shuffleId);
    }

    /** Removes {@code shuffleId}'s output table (deregistering its outputs); no table of it is created after. */
    public void unregisterShuffle(int shuffleId) {
        unregisterShuffle(shuffleId, Runnable::run);
    }

    /**
     * Removes {@code shuffleId}'s output table at once — its table region is deregistered, so no peer finds any of
     * its outputs from now on, and no table of it is created after — and deregisters and unmaps its outputs on
     * {@code deregisterOn} (here, when it refuses the work): O(1) on the calling thread, O(outputs) there. Until
     * that ran, {@link #registeredOutputBytes()} counts them.
     */
    public void unregisterShuffle(int shuffleId, Executor deregisterOn) {
        RegisteredOutputTable t;
        synchronized (tables) { // with table(): no table of this shuffle can be created after this
            unregistered.add(shuffleId);
            while (unregistered.size() > MAX_UNREGISTERED_REMEMBERED) {
                unregistered.pollFirst(); // shuffle ids grow: the oldest are the least likely to come back
            }
            t = tables.remove(shuffleId);
        }
        noTable.remove(shuffleId);
        if (t == null) {
            return;
        }
        t.withdraw();
        closing.add(t);
        Runnable close = () -> {
            try {
                t.close();
            } finally {
                closing.remove(t);
            }
        };
        try {
            deregisterOn.execute(close);
        } catch (RejectedExecutionException e) { // the worker stopped (its owner is closing): here, then
            close.run();
        }
    }

    /** Adds the shuffles held here (an output table, or one that could not be registered) to {@code out}. */
    public void addShufflesTo(java.util.Collection<Integer> out) {
        out.addAll(tables.keySet());
        out.addAll(noTable);
    }

    /**
     * Stops the maintenance thread (last started, first stopped: no check runs on what closes below), removes
     * every output table and closes it — also those removed earlier whose outputs another thread was deregistering
     * ({@link #unregisterShuffle(int, Executor)}: waits for the one under way there) — then closes the node (its
     * channels stop and complete their READs before their buffers' memory goes), then the pool. The directory
     * entry is left to the directory (a process that stops is removed there by its engine).
     */
    @Override
    public void close() {
        maintenance.shutdownNow();
        try {
            if (!maintenance.awaitTermination(10, TimeUnit.SECONDS)) {
                LOG.warn("rdma-shuffle: process {}'s maintenance thread did not stop within 10 s", id);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (Integer shuffleId : tables.keySet()) {
            unregisterShuffle(shuffleId);
        }
        // Tables unregistered earlier whose outputs another thread deregisters (or has queued): closed here, before
        // the node, so no region is deregistered after the node (a device) closed. A table's close is synchronized
        // and idempotent: this waits for the one being closed there, and the queued ones find nothing to do.
        for (RegisteredOutputTable t : closing) {
            try {
                t.close();
            } catch (RuntimeException e) {
                LOG.warn("rdma-shuffle: process {}: deregistering a removed output table's outputs failed: {}", id,
                        e.toString(), e);
            } finally {
                closing.remove(t);
            }
        }
        node.close();
        pool.close();
    }
}
