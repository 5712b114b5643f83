package org.rdmashuffle.mapreduce;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapred.IndexRecord;
import org.apache.hadoop.mapred.SpillRecord;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapState;
import org.rdmashuffle.shuffle.core.serve.MapOutputServer;
import org.rdmashuffle.shuffle.core.directory.NoPeerDirectory;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The transport node of the NodeManagers of one process, on their fixed port: a {@link MapOutputServer}
 * whose realms are the jobs ({@link ServedJobs}) and whose control handler answers REGISTER
 * ({@link RegisterProtocol}). A production NodeManager is one per process; a MiniYARNCluster runs several in one
 * process, and they share the port's node (each adds its local dirs; the last one to stop closes it).
 *
 * <p>Threads: {@link #acquire}/{@link #release} on NodeManager service threads; container and application
 * events on the NodeManager's dispatcher (never waiting for a job's lock, nor deregistering a stopped job's
 * outputs: its own thread does, {@link #dropJob}); REGISTER on the register workers ({@link RegisterWorkers}:
 * {@value #REGISTER_THREADS} threads, a job on one of them at most, round-robin across jobs; at most
 * {@value #REGISTER_QUEUE} waiting (a job with none waiting is admitted still), {@value #REGISTER_QUEUE_PER_JOB} of
 * one job; past that a reducer is answered {@link RegisterProtocol#BUSY} and fetches that batch over HTTP this
 * time), never on the node's transport thread: a
 * REGISTER reads index files, and a slow disk must not delay the READs of every job, nor one job's disk the
 * REGISTERs of the others; its connection waits for the reply meanwhile, every other is served. A REGISTER reads
 * its files without its job's lock and takes it to publish and record. A REGISTER's map output files are opened on
 * opener threads ({@link OutputFileOpener}), the register worker waiting {@value #OPEN_BOUND_MS} ms at most (a FIFO a
 * task swaps in would never open). Secret lookups on the transport thread answer from memory (the job tokens YARN
 * handed the service).
 */
final class ShuffleServer implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(ShuffleServer.class);
    /** Guarded by the class: the running server of each port in this process. */
    private static final Map<Integer, ShuffleServer> BY_PORT = new HashMap<>();

    private final int port;
    private final ServedJobs jobs;
    /** Every job's map output indexes, bounded ({@link MapReduceRdmaConf#INDEX_CACHE_MAX_BYTES}). */
    private final IndexCache indexes;
    private final MapOutputServer server;
    /**
     * Deregisters stopped jobs' outputs, one job after another, off the NodeManager's dispatcher (a job of 10,000
     * outputs takes that many deregistrations and unmaps).
     */
    private final java.util.concurrent.ExecutorService deregistrations;
    /** Runs work on {@link #deregistrations}, a failure of it logged once (WARN) rather than left to the thread. */
    private final java.util.concurrent.Executor jobStops;
    private int holders;
    /** REGISTERs running at once at most (of different jobs: a job runs on one worker at most). */
    static final int REGISTER_THREADS = 2;
    /**
     * REGISTERs waiting for a register worker at most; one more is answered {@link RegisterProtocol#BUSY} unless its
     * job has none waiting (then it waits: jobs at their share never shut another job out).
     */
    static final int REGISTER_QUEUE = 64;
    /** REGISTERs of one job waiting at most; one more of that job is answered {@link RegisterProtocol#BUSY}. */
    static final int REGISTER_QUEUE_PER_JOB = 16;
    /**
     * Runs REGISTERs (index reads, mapping data files) off the node's transport thread, fairly across jobs. Started
     * before the node (a REGISTER may come as soon as it listens); stops taking REGISTERs before the node closes and
     * is gone after.
     */
    private final RegisterWorkers registers;
    /** Guards creating output tables within {@link #maxTableBytes}. */
    private final Object tableBudget = new Object();
    /** Bytes of every job's output table together at most ({@link MapReduceRdmaConf#MAX_TABLE_BYTES}). */
    private final long maxTableBytes;
    /** A REGISTER reply's bytes at most (the node's {@code maxControlMessageSize}): locations past it are left out. */
    private final int maxReplyBytes;
    /** Jobs whose output table was refused here (WARNed once each); forgotten when the job stops. */
    private final java.util.Set<Integer> tableRefused = java.util.concurrent.ConcurrentHashMap.newKeySet();

    /** What happens between the steps of registering an output's files (tests plant links there). */
    private volatile FileSteps fileSteps = FileSteps.NONE;
    /**
     * Whether map output files must be owned by their job's user to be served (security is on: Hadoop's
     * {@code ShuffleHandler} opens them with {@code SecureIOUtils} then).
     */
    private final boolean ownerChecked;
    /** Why the owner check cannot be sound on this kernel ({@code null}: it can, or security is off). */
    private final String ownerUnsound;
    /** Tests: where the kernel's {@code fs.protected_hardlinks} is read, when a server starts. */
    static volatile java.nio.file.Path protectedHardlinks = LocalDirs.PROTECTED_HARDLINKS;
    /** How long a register worker waits for a map output file to open (a FIFO swapped in never opens). */
    static final long OPEN_BOUND_MS = 5000;
    /** Opens map output files within {@link #OPEN_BOUND_MS}. */
    private final OutputFileOpener opener;
    /** Files refused for their owner (WARNed at most once a minute), and when that WARN was last logged. */
    private final java.util.concurrent.atomic.AtomicLong wrongOwners = new java.util.concurrent.atomic.AtomicLong();
    private final java.util.concurrent.atomic.AtomicLong wrongOwnerWarnedNanos =
            new java.util.concurrent.atomic.AtomicLong(System.nanoTime() - 120_000_000_000L);

    /**
     * Whether Hadoop security is on for the service: {@code UserGroupInformation.isSecurityEnabled()} (as the
     * NodeManager set it up), or {@code hadoop.security.authentication} other than {@code simple} in the service's
     * configuration.
     */
    static boolean securityEnabled(Configuration conf) {
        return org.apache.hadoop.security.UserGroupInformation.isSecurityEnabled()
                || !"simple".equalsIgnoreCase(conf.getTrimmed("hadoop.security.authentication", "simple"));
    }

    /** Whether map output files are served only when owned by their job's user (security is on). */
    boolean ownerChecked() {
        return ownerChecked;
    }

    /** The opener of map output files (tests look at its threads). */
    OutputFileOpener opener() {
        return opener;
    }

    /** Whether the WARN that this JVM cannot open map outputs safely (so serves none) was logged. */
    private final java.util.concurrent.atomic.AtomicBoolean warnedNoSecureOpen =
            new java.util.concurrent.atomic.AtomicBoolean();

    /**
     * A test seam: called between the steps of registering a map output's files, on the thread registering it.
     */
    interface FileSteps {
        FileSteps NONE = new FileSteps() {
        };

        /** The attempt's files were found (by path); none of them is opened yet. */
        default void located(File index, File data) {
        }

        /** The index was read; the data file is not mapped yet. */
        default void indexRead(File index, File data) {
        }

        /** A file ({@code shown}: its path) was checked to be a plain file (and its owner); it is not opened yet. */
        default void checked(String shown) {
        }
    }

    /** Tests: what runs between the steps of registering an output's files. */
    void fileSteps(FileSteps steps) {
        this.fileSteps = steps;
    }

    private ShuffleServer(int port, Configuration conf, RdmaShuffleConf rdma, String bindHost, String advertisedHost)
            throws IOException {
        this.port = port;
        this.ownerChecked = securityEnabled(conf);
        this.ownerUnsound = ownerChecked ? LocalDirs.hardlinksUnprotected(protectedHardlinks) : null;
        if (ownerUnsound != null && warnedNoSecureOpen.compareAndSet(false, true)) {
            LOG.warn("rdma-shuffle: map outputs are served over HTTP only: {}", ownerUnsound);
        }
        this.opener = new OutputFileOpener(OPEN_BOUND_MS, shown -> fileSteps.checked(shown), Integer.toString(port));
        this.jobs = new ServedJobs();
        this.indexes = new IndexCache(MapReduceRdmaConf.indexCacheMaxBytes(conf));
        this.maxTableBytes = MapReduceRdmaConf.maxTableBytes(conf);
        this.maxReplyBytes = rdma.maxControlMessageSizeBytes();
        NodeOptions options = new NodeOptions(bindHost, advertisedHost, ControlHandler.NONE, null)
                .withSecrets(jobs::secretOf);
        this.registers = new RegisterWorkers(REGISTER_THREADS, REGISTER_QUEUE, REGISTER_QUEUE_PER_JOB,
                "rdma-shuffle-register-" + port);
        try {
            this.server = new MapOutputServer(rdma, options, s -> registers.handler(this::register), new NoPeerDirectory(),
                    "nodemanager-" + advertisedHost + ":" + port, jobs::realmOf, true); // tables count as registered
        } catch (IOException | RuntimeException | Error e) {
            registers.close();
            opener.close();
            throw e;
        }
        this.deregistrations = java.util.concurrent.Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "rdma-shuffle-job-stop-" + port);
            t.setDaemon(true);
            return t;
        });
        this.jobStops = work -> deregistrations.execute(() -> { // rejected (stopped): the caller runs it itself
            try {
                work.run();
            } catch (RuntimeException | Error e) {
                LOG.warn("rdma-shuffle: deregistering a stopped job's outputs failed: {}", e.toString(), e);
            }
        });
    }

    /** The port's server, started for the first NodeManager of this process that asks. */
    static ShuffleServer acquire(Configuration conf, RdmaShuffleConf rdma, String bindHost, String advertisedHost)
            throws IOException {
        int port = rdma.port();
        synchronized (ShuffleServer.class) {
            ShuffleServer s = BY_PORT.get(port);
            if (s == null) {
                s = new ShuffleServer(port, conf, rdma, bindHost, advertisedHost);
                BY_PORT.put(port, s);
                LOG.info("rdma-shuffle: MapReduce shuffle service listening at {}", s.server.node().localAddress());
            }
            s.holders++;
            return s;
        }
    }

    /** Gives back a NodeManager's hold; the last one closes the server. */
    void release() {
        synchronized (ShuffleServer.class) {
            if (--holders > 0) {
                return;
            }
            BY_PORT.remove(port, this);
        }
        close();
    }

    ServedJobs jobs() {
        return jobs;
    }

    NodeAddress address() {
        return server.node().localAddress();
    }

    /** The indexes held for reducers' lengths (their bytes and disk reads, for tests and operators). */
    IndexCache indexes() {
        return indexes;
    }

    MapOutputServer outputs() {
        return server;
    }

    /** The thread stopped jobs' outputs are deregistered on (tests hold it to see what a stop does meanwhile). */
    java.util.concurrent.Executor deregistrations() {
        return jobStops;
    }

    /** Waits until the deregistrations of the jobs stopped so far are done (tests). */
    void awaitDeregistrations() throws Exception {
        deregistrations.submit(() -> { }).get();
    }

    /**
     * Drops a stopped job's table. Called on the NodeManager's dispatcher, which must never wait for the job's lock
     * (a REGISTER holding it may be reading a slow disk) nor for work that grows with the job's outputs: the table
     * goes now (its region deregistered: the job's reducers find nothing through it; a REGISTER still running finds
     * no table to publish into, and the job's indexes go with the job), and its outputs are deregistered and
     * unmapped on the job-stop thread, after the jobs stopped before it.
     */
    void dropJob(ServedJobs.Job job) {
        job.stopped = true;
        indexes.dropJob(job.shuffleId);
        server.unregisterShuffle(job.shuffleId, jobStops);
        tableRefused.remove(job.shuffleId);
    }

    /** REGISTERs waiting for a register worker now (tests). */
    int registersWaiting() {
        return registers.waiting();
    }

    /** REGISTERs answered {@link RegisterProtocol#BUSY} since the server started. */
    long busyReplies() {
        return registers.busyReplies();
    }

    /** The register workers, each task given as a job of its own (tests fill them: {@link RegisterWorkers#asExecutor}). */
    java.util.concurrent.Executor registerWorkers() {
        return registers.asExecutor();
    }

    /** Answers a REGISTER from a connection authenticated for {@code realm}. */
    ByteBuffer register(String realm, ByteBuffer message) {
        ServedJobs.Job job = jobs.job(realm);
        if (job == null) {
            return RegisterProtocol.encodeRefusal(RegisterProtocol.UNKNOWN_JOB, "this NodeManager serves no job " + realm);
        }
        RegisterProtocol.Request r;
        try {
            r = RegisterProtocol.parseRequest(message);
        } catch (IllegalArgumentException e) {
            LOG.warn("rdma-shuffle: a bad REGISTER for job {}: {}", realm, e.getMessage());
            return RegisterProtocol.encodeRefusal(RegisterProtocol.BAD_REQUEST, e.getMessage());
        }
        // The job's lock guards its counts and its outputs: taken to check and record, never across disk reads.
        synchronized (job) {
            if (job.stopped) {
                job.outputs.clear();
                return RegisterProtocol.encodeRefusal(RegisterProtocol.UNKNOWN_JOB, "job " + realm + " stopped here");
            }
            if (job.numMaps == 0) {
                job.numMaps = r.numMaps();
                job.numReduces = r.numReduces();
            } else if (job.numMaps != r.numMaps() || job.numReduces != r.numReduces()) {
                return RegisterProtocol.encodeRefusal(RegisterProtocol.BAD_REQUEST, "job " + realm + " has "
                        + job.numMaps + " maps and " + job.numReduces + " reduces, not " + r.numMaps() + " and "
                        + r.numReduces());
            }
        }
        RegisteredOutputTable table;
        try {
            table = tableOf(job.shuffleId, r.numMaps());
        } catch (IOException | RuntimeException e) {
            String why = e.getMessage() == null ? e.toString()
                    : e.getMessage().replace(RdmaShuffleConf.PREFIX, MapReduceRdmaConf.PREFIX);
            if (tableRefused.add(job.shuffleId)) { // one WARN per job
                LOG.warn("rdma-shuffle: job {} is served over HTTP on this NodeManager: its output table cannot be"
                        + " registered here: {}", realm, why);
            }
            return RegisterProtocol.encodeRefusal(RegisterProtocol.NO_ROOM, "its output table cannot be"
                    + " registered here: " + why);
        }
        if (table == null) {
            return RegisterProtocol.encodeRefusal(RegisterProtocol.UNKNOWN_JOB, "job " + realm + " stopped here");
        }
        MapState[] states = new MapState[r.maps().length];
        int gone = 0;
        for (int i = 0; i < states.length; i++) {
            states[i] = serve(job, r, r.maps()[i]);
            if (states[i] == STOPPED) { // the application stopped meanwhile: nothing of it is answered
                return RegisterProtocol.encodeRefusal(RegisterProtocol.UNKNOWN_JOB, "job " + realm + " stopped here");
            }
            gone += states[i] == MapState.GONE ? 1 : 0;
        }
        if (gone > 0) { // one line per request, not per map
            LOG.info("rdma-shuffle: {} of {} map outputs a reducer of job {} asked for are not on this NodeManager",
                    gone, states.length, realm);
        }
        return RegisterProtocol.encodeOk(table.descriptor(), states, r.version(), maxReplyBytes);
    }

    /**
     * {@code shuffleId}'s output table, created if it is not yet and the tables of every job together stay within
     * {@link MapReduceRdmaConf#MAX_TABLE_BYTES} ({@code numMaps} is the job's reducers' claim: 32 bytes of direct
     * memory per map, held until the job stops), and one job's table within half of it ({@link #jobTableBytes}), so
     * one reducer's claim cannot take the whole bound; null when the job's shuffle was unregistered here (it stopped).
     *
     * @throws IOException when the table does not fit those bounds or the registered-bytes cap (it names the key)
     */
    private RegisteredOutputTable tableOf(int shuffleId, int numMaps) throws IOException {
        synchronized (tableBudget) { // the check and the creation are one step among jobs
            if (!server.shufflesWithTable().contains(shuffleId)) {
                long bytes = RegisteredOutputTable.tableBytes(numMaps);
                long held = server.tableBytes();
                long perJob = jobTableBytes(maxTableBytes);
                if (bytes > perJob) {
                    throw new IOException("its table of " + numMaps + " maps (" + bytes + " bytes) would pass one"
                            + " job's share, half of " + MapReduceRdmaConf.MAX_TABLE_BYTES + " (" + perJob + " of "
                            + maxTableBytes + " bytes)");
                }
                if (held + bytes > maxTableBytes) {
                    throw new IOException("its table of " + numMaps + " maps (" + bytes + " bytes) would pass "
                            + MapReduceRdmaConf.MAX_TABLE_BYTES + " (" + maxTableBytes + " bytes; " + held
                            + " held by other jobs' tables)");
                }
            }
            return server.table(shuffleId, numMaps);
        }
    }

    /** One job's output table at most: half of {@code maxTableBytes}, and never less than a table of one map. */
    static long jobTableBytes(long maxTableBytes) {
        return Math.max(RegisteredOutputTable.tableBytes(1), maxTableBytes / 2);
    }

    /**
     * What {@link #serve} says when the job stopped while its REGISTER ran (compared by identity): the REGISTER is
     * answered {@link RegisterProtocol#UNKNOWN_JOB}.
     */
    private static final MapState STOPPED = new MapState(RegisterProtocol.MISSING, 0, 0);

    /** Registers {@code m}'s output if it is not yet, and says what the reducer finds in the table. */
    private MapState serve(ServedJobs.Job job, RegisterProtocol.Request r, MapAttempt m) {
        ServedJobs.Registered reg;
        synchronized (job) {
            reg = job.outputs.get(m.mapIndex());
        }
        if (reg != null && reg.attempt() > m.attempt()) {
            // A later attempt of the map is registered: a reducer that has not yet heard this one is obsolete must
            // not knock the later one out of the table (other reducers may be READing it). HTTP serves it by path.
            return MapState.HTTP;
        }
        IndexCache.Key key = new IndexCache.Key(job.shuffleId, m.mapIndex(), m.attempt());
        TaskAttemptID attempt = new TaskAttemptID(new TaskID(job.jobId, TaskType.MAP, m.mapIndex()), m.attempt());
        if (reg == null || reg.attempt() != m.attempt()) {
            IndexCache.Located files = indexes.locate(job, attempt, key);
            if (files == null) {
                LOG.debug("rdma-shuffle: output of {} is not on this NodeManager", attempt);
                return MapState.GONE;
            }
            fileSteps.located(files.index(), files.data());
            // Only plain files reached from the local dir through directories (no link, pipe or device), opened so
            // that what is checked is what is read and mapped, and an index of exactly the job's reduces: nothing
            // else is read into memory or mapped.
            LocalDirs.OpenedFiles opened;
            try {
                opened = files.open(rules(job));
            } catch (LocalDirs.NoSecureOpen e) {
                if (warnedNoSecureOpen.compareAndSet(false, true)) {
                    LOG.warn("rdma-shuffle: map outputs are served over HTTP only: {}", e.getMessage());
                }
                return MapState.HTTP;
            } catch (LocalDirs.WrongOwner e) {
                warnWrongOwner(attempt, e);
                return MapState.GONE;
            } catch (OutputFileOpener.NotOpenedInTime e) { // a slow disk must not get the map rerun
                if (!e.warned()) { // a job past its stuck opens is WARNed once
                    LOG.warn("rdma-shuffle: the output of {} goes over HTTP: {}", attempt, e.getMessage());
                }
                return MapState.HTTP;
            } catch (IOException e) {
                LOG.warn("rdma-shuffle: the output of {} is not served: {}", attempt, e.toString());
                return MapState.GONE;
            }
            try {
                return publish(job, r, m, attempt, key, files, opened.get(0), opened.get(1));
            } catch (IOException e) {
                LOG.warn("rdma-shuffle: the output of {} is not served: {}", attempt, e.toString());
                return MapState.GONE;
            } finally {
                try {
                    opened.close(); // what was mapped stays mapped
                } catch (IOException e) {
                    LOG.debug("rdma-shuffle: closing the files of {} failed", attempt, e);
                }
            }
        }
        SpillRecord spill;
        try {
            spill = indexes.get(key, IndexCache.Located.of(reg.index(), IndexCache.attemptDir(job, attempt)),
                    r.numReduces(), rules(job));
        } catch (LocalDirs.WrongOwner e) {
            warnWrongOwner(attempt, e);
            return MapState.GONE;
        } catch (OutputFileOpener.NotOpenedInTime e) {
            if (!e.warned()) {
                LOG.warn("rdma-shuffle: the output of {} goes over HTTP: {}", attempt, e.getMessage());
            }
            return MapState.HTTP;
        } catch (IOException e) { // dropped from memory, and its file is gone or changed since it was registered
            LOG.warn("rdma-shuffle: cannot read the index of map {} attempt {} of job {} again: {}", m.mapIndex(),
                    m.attempt(), job.realm(), e.toString());
            return MapState.GONE;
        }
        return forgotIfStopped(job) ? STOPPED : answer(job, r, m, spill.getIndex(r.reduce()));
    }

    /**
     * What a reducer finds of registered attempt {@code m}: its partition's lengths ({@code rec}) and, asked in version
     * 2, where it lies while the table holds that attempt registered ({@link RegisterProtocol#LOCATED}; else
     * {@link RegisterProtocol#PUBLISHED}: the reducer READs the table, which says what it holds).
     */
    private MapState answer(ServedJobs.Job job, RegisterProtocol.Request r, MapAttempt m, IndexRecord rec) {
        return RegisterProtocol.answer(rec.startOffset, rec.rawLength, rec.partLength,
                r.version() < RegisterProtocol.LOCATED_VERSION ? null
                        : server.dataRegions(job.shuffleId, m.mapIndex(), m.attempt()));
    }

    /** How {@code job}'s output files are opened: owned by its user when security is on, within the bound. */
    private LocalDirs.Rules rules(ServedJobs.Job job) {
        return new LocalDirs.Rules(ownerChecked ? job.user : null, opener, job.realm(), ownerUnsound);
    }

    /** One WARN a minute at most for outputs refused for their owner, with how many were since the last. */
    private void warnWrongOwner(TaskAttemptID attempt, LocalDirs.WrongOwner e) {
        long n = wrongOwners.incrementAndGet();
        long last = wrongOwnerWarnedNanos.get();
        long now = System.nanoTime();
        if (now - last >= 60_000_000_000L && wrongOwnerWarnedNanos.compareAndSet(last, now)) {
            LOG.warn("rdma-shuffle: the output of {} is not served (security is on): {} ({} output(s) refused for"
                    + " their owner so far; logged once a minute at most)", attempt, e.getMessage(), n);
        }
    }

    /** Outputs refused because a file was not owned by the job's user (security on). */
    long wrongOwners() {
        return wrongOwners.get();
    }

    /** Reads the opened index, publishes the opened data file with its offsets, and says what the reducer finds. */
    private MapState publish(ServedJobs.Job job, RegisterProtocol.Request r, MapAttempt m, TaskAttemptID attempt,
                             IndexCache.Key key, IndexCache.Located files, java.nio.channels.FileChannel index,
                             java.nio.channels.FileChannel data) throws IOException {
        long indexBytes = index.size();
        long dataBytes = data.size();
        if (indexBytes != (long) r.numReduces() * INDEX_RECORD_BYTES + INDEX_CHECKSUM_BYTES) {
            LOG.warn("rdma-shuffle: index {} ({} bytes) is not one of {} partitions: that output goes over HTTP",
                    files.index(), indexBytes, r.numReduces());
            return MapState.HTTP;
        }
        SpillRecord spill;
        try {
            spill = indexes.read(index, files.index().toString(), r.numReduces());
        } catch (IOException e) {
            LOG.warn("rdma-shuffle: cannot read the index of {}: {}", attempt, e.toString());
            return MapState.GONE;
        }
        fileSteps.indexRead(files.index(), files.data());
        long[] offsets = IndexCache.offsets(spill, r.numReduces(), dataBytes);
        if (offsets == null) {
            LOG.warn("rdma-shuffle: index {} ({} partitions) does not describe {} ({} bytes) of a job of {}"
                    + " reduces contiguously: that output goes over HTTP", files.index(), spill.size(), files.data(),
                    dataBytes, r.numReduces());
            return MapState.HTTP;
        }
        synchronized (job) { // published and recorded as one step of the job (the files are read by now)
            if (job.stopped) {
                return STOPPED;
            }
            ServedJobs.Registered now = job.outputs.get(m.mapIndex());
            if (now != null && now.attempt() > m.attempt()) {
                return MapState.HTTP; // a later attempt was registered meanwhile (as in serve)
            }
            if (now == null || now.attempt() != m.attempt()) {
                if (!server.publish(job.shuffleId, job.numMaps, m.mapIndex(), m.attempt(), data,
                        files.data().toString(), offsets)) {
                    // In no table: the job's shuffle was unregistered (it stopped), or the node failed.
                    return job.stopped ? STOPPED : MapState.HTTP;
                }
                job.outputs.put(m.mapIndex(), new ServedJobs.Registered(m.attempt(), files.index()));
            }
        }
        indexes.put(key, spill);
        return forgotIfStopped(job) ? STOPPED : answer(job, r, m, spill.getIndex(r.reduce()));
    }

    /**
     * After an index of {@code job} was put in the cache: whether the job stopped meanwhile, then dropping what this
     * REGISTER put there. {@link #dropJob} marks the job stopped before it drops its indexes, so either it drops
     * what was put, or this sees it stopped and drops it.
     */
    private boolean forgotIfStopped(ServedJobs.Job job) {
        if (!job.stopped) {
            return false;
        }
        indexes.dropJob(job.shuffleId);
        return true;
    }

    /** An index record: start offset, raw length, part length (Hadoop's {@code MapTask.MAP_OUTPUT_INDEX_RECORD_LENGTH}). */
    static final int INDEX_RECORD_BYTES = 24;
    /** The CRC32 after an index file's records. */
    static final int INDEX_CHECKSUM_BYTES = 8;


    /**
     * Stops taking REGISTERs (one from now on is answered busy; those still waiting for a worker are answered so
     * too) and waits for the running ones (at most 10 s: they publish into the tables), stops taking job stops
     * (one from now on is deregistered on its caller), then closes the server: it closes every output table — a
     * stopped job's too, whose deregistration the worker has under way (waited for) or queued — before its node,
     * so no region is deregistered after the node closed. What the worker still has queued finds its table closed
     * and is dropped. The register workers' threads go last.
     */
    @Override
    public void close() {
        try {
            if (!registers.close(10_000)) {
                LOG.warn("rdma-shuffle: REGISTERs still running after 10 s as the service on port {} stops", port);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        deregistrations.shutdown();
        try {
            server.close();
        } finally {
            deregistrations.shutdownNow();
            registers.close();
            opener.close();
        }
    }
}
