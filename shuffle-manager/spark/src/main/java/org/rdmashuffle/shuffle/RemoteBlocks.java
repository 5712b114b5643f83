package org.rdmashuffle.shuffle;

import java.io.IOException;
import java.io.InputStream;
import java.io.PushbackInputStream;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import org.apache.spark.SparkConf;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.storage.ShuffleBlockId;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.FailedReadClassifier;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.shuffle.core.fetch.ReadOutcome;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Tuple2;
import scala.collection.Iterator;

/**
 * A reduce task's blocks READ from peers: every request handed to its {@link BlockFetcher} up front (a run
 * of consecutive blocks of one map output per request), which posts them within its budget, so fetching
 * overlaps decoding; each block landed is checked against the MapOutputTracker and opened slice by slice
 * (a block whose decoding cannot start is READ again once, alone). Blocks that cannot be READ are handed to
 * {@link SparkPathBlocks}: left unregistered at their peer, of a peer that withdrew its node, or — when this
 * executor runs out of receive memory or pool room, or its own node failed — every block not READ yet.
 *
 * <p>Threads: everything here runs on the task thread; the fetcher's READs complete on the transport's
 * completion threads, which only land bytes and wake the task ({@link BlockFetcher#next}). The maintenance
 * thread is only asked to withdraw this executor's node when it is found failed.
 *
 * <p>Failures: what to do about a failed request ({@link #takeNext}), a block that does not match the tracker
 * ({@link #checkSlices}), a corrupt block ({@link #openNextSlice}) or a streamed window that failed is decided by
 * the core's {@link FailedReadClassifier} — this executor's own node failed, the peer withdrew its node (asked
 * of the driver's directory, {@link FetchFailures#nodeWithdrawn}, for every failure that would blame it), READ
 * again, or blame the peer — and turned here into Spark's words: Spark's path for the blocks, or
 * {@link FetchFailures#fetchFailed} (unless an external shuffle service serves the rest).
 */
final class RemoteBlocks implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(RemoteBlocks.class);
    /** Records of local blocks between two polls of the fetcher for pool room freed elsewhere. */
    private static final int LOCAL_RECORDS_PER_PROGRESS = 1024;

    private final ExecutorRuntime rt;
    private final int shuffleId;
    private final FetchFailures failures;
    private final BlockDecoder decoder;
    private final ShuffleReadMetricsReporter metrics;
    private final SparkPathBlocks sparkPath;
    private final SparkConf sparkConf;
    private final BlockFetcher fetcher;
    /** The blocks of each request, and the origin a failure concerns. */
    private final RequestOrigins origins = new RequestOrigins();
    /** The executor of each peer node READ from. */
    private final Map<NodeAddress, String> peerIds = new HashMap<>();
    private final FailedReadClassifier classifier;
    private final Map<BlockManagerId, RegionDescriptor> tables;
    /** The incarnation of each peer's node this task READs from, by executor. */
    private final Map<String, Long> incarnations;
    private final int numPartitions;
    /** Bytes (the tracker's upper bounds) one request for several blocks of a map output covers at most. */
    private final long rangeBytes;
    /** A failed READ sends the task's remaining blocks through Spark's client (an external shuffle service). */
    private final boolean sparkAfterFailure;
    /** Each request's blocks are decoded as one block, as Spark's batch fetch does ({@link SparkInterop#batchFetch}). */
    private final boolean batch;
    private final CorruptionDiagnosis diagnosis;
    /** Remote blocks found corrupt once and READ again; a second time fails the fetch. */
    private final Set<BlockFetcher.Request> corruptOnce = new HashSet<>();
    /** Peers whose node failed and left the directory (or was replaced) while this task READ from them. */
    private final Set<String> withdrawnPeers = new HashSet<>();
    /** Set once the READs were given up: the fetcher is closed. */
    private boolean readsAbandoned;
    /** Local records read since the fetcher last had a chance to move. */
    private int localRecords;
    private BlockFetcher.Block block;
    /** The blocks {@link #block} holds, decoded one after the other, and the next one's index. */
    private List<BlockOrigin> sliceOrigins;
    private int nextSlice;

    /**
     * Opens the fetcher (from the runtime's node and pool); requests follow with {@link #queue}.
     *
     * @param tables the output table of each peer READ from
     */
    RemoteBlocks(ExecutorRuntime rt, int shuffleId, int numPartitions, SparkConf sparkConf,
                 Map<BlockManagerId, RegionDescriptor> tables, Map<String, Long> incarnations, boolean batch,
                 boolean sparkAfterFailure, FetchFailures failures, BlockDecoder decoder,
                 CorruptionDiagnosis diagnosis, ShuffleReadMetricsReporter metrics, SparkPathBlocks sparkPath) {
        this.batch = batch;
        this.diagnosis = diagnosis;
        this.rt = rt;
        this.shuffleId = shuffleId;
        this.numPartitions = numPartitions;
        this.sparkConf = sparkConf;
        this.tables = tables;
        this.incarnations = incarnations;
        this.sparkAfterFailure = sparkAfterFailure;
        this.failures = failures;
        this.decoder = decoder;
        this.metrics = metrics;
        this.sparkPath = sparkPath;
        this.rangeBytes = rt.pool.options().maxBufferBytes();
        this.fetcher = new BlockFetcher(rt.node, rt.pool, rt.remote.metadataCache(shuffleId),
                rt.conf.maxBytesInFlight(), rt.conf.maxReadsInFlightPerPeer(), rt.conf.readBlockSizeBytes(),
                rt.conf.requestTimeoutMs());
        this.classifier = new FailedReadClassifier(rt::failed, this::peerWithdrew,
                rt.conf.fallback() != RdmaShuffleConf.Fallback.NEVER);
    }

    /**
     * Hands every request for {@code remote} to the fetcher. A map output's blocks of this task's partitions
     * lie one after the other in its data file: one request fetches a run of them (AQE coalescing), up to a
     * buffer's worth by the most bytes the tracker allows each block — not its reported size: past
     * spark.shuffle.minNumPartitionsToHighlyCompress a MapStatus reports the map's average for every block
     * under the accurate-size threshold, and a run grouped by averages could hold gigabytes. There every
     * block goes alone, as before merging.
     */
    void queue(List<BlockOrigin> remote) {
        Map<List<Object>, List<BlockOrigin>> byOutput = new LinkedHashMap<>();
        for (BlockOrigin o : remote) {
            byOutput.computeIfAbsent(List.of(o.address(), o.mapIndex(), o.blockId().mapId()),
                    k -> new ArrayList<>()).add(o);
        }
        for (List<BlockOrigin> blocks : byOutput.values()) {
            blocks.sort(Comparator.comparingInt(o -> o.blockId().reduceId()));
            long[] bounds = new long[blocks.size()];
            for (int i = 0; i < bounds.length; i++) {
                bounds[i] = mostBytes(blocks.get(i));
            }
            int from = 0;
            for (int to : RdmaShuffleReader.runEnds(bounds, rangeBytes)) {
                addToFetcher(blocks.subList(from, to));
                from = to;
            }
        }
    }

    /** The most bytes the tracker allows block {@code o}; never 0, as empty blocks are not fetched. */
    private long mostBytes(BlockOrigin o) {
        return SparkInterop.mostBytesOfBlock(o.reportedBytes(), numPartitions, sparkConf);
    }

    /**
     * Queues one request for {@code blocks}: consecutive blocks (by reduce id) of one map output, whose
     * partitions from the first to the last lie one after the other in its data file. Partitions
     * between them that the tracker reports empty must hold no bytes at the peer ({@link #checkSlices}).
     */
    private void addToFetcher(List<BlockOrigin> blocks) {
        BlockOrigin first = blocks.get(0);
        long most = 0;
        for (BlockOrigin o : blocks) {
            long m = mostBytes(o);
            most = m > Long.MAX_VALUE - most ? Long.MAX_VALUE : most + m;
        }
        // Reported sizes are never 0 here (empty blocks are skipped), and a MapStatus reports 0 only for
        // empty blocks: each block holds at least one byte.
        BlockFetcher.Expected expected = new BlockFetcher.Expected(numPartitions, blocks.size(), most);
        BlockFetcher.Request r = new BlockFetcher.Request(first.peer(), tables.get(first.address()),
                first.mapIndex(), first.blockId().mapId(), first.blockId().reduceId(),
                blocks.get(blocks.size() - 1).blockId().reduceId() + 1, expected);
        origins.add(r, List.copyOf(blocks));
        peerIds.putIfAbsent(first.peer(), first.address().executorId());
        addToFetcher(r);
    }

    private void addToFetcher(BlockFetcher.Request r) {
        if (readsAbandoned) {
            readRestThroughSpark(null);
            return;
        }
        try {
            fetcher.add(r);
        } catch (BufferPoolException e) {
            readRestThroughSpark(e);
        }
    }

    /** Lets the fetcher post its next READs (between local blocks). */
    void progress() {
        if (readsAbandoned) {
            return;
        }
        try {
            fetcher.progress();
        } catch (BufferPoolException e) {
            readRestThroughSpark(e);
        }
    }

    /**
     * After each record of a local block: a large local block must not hold back the remote ones' next READs
     * (slot, metadata, data): takes up what landed at once, and looks for freed pool room now and then. No
     * allocation.
     */
    void afterLocalRecord() {
        if (!readsAbandoned && (fetcher.hasLanded() || ++localRecords == LOCAL_RECORDS_PER_PROGRESS)) {
            localRecords = 0;
            progress();
        }
    }

    /** Whether requests are still to be handed out by the fetcher. */
    boolean hasOutstanding() {
        return !readsAbandoned && fetcher.outstanding() > 0;
    }

    /** Whether the block taken last has slices not opened yet. */
    boolean hasMoreSlices() {
        return block != null && nextSlice < sliceOrigins.size();
    }

    /**
     * Takes the next block from the fetcher (waiting for it), checked against the tracker; its slices are
     * opened with {@link #openNextSlice}. A block its executor left unregistered, or a failure that blames
     * nobody, hands blocks to Spark's path instead.
     */
    void takeNext() {
        long t0 = System.nanoTime();
        try {
            block = fetcher.next();
        } catch (BufferPoolException e) {
            readRestThroughSpark(e);
            return;
        } catch (FetchFailure f) {
            fetchFailed(f);
            return;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while fetching shuffle blocks", e);
        } finally {
            metrics.incFetchWaitTime(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
        }
        BlockFetcher.Request r = block.request();
        List<BlockOrigin> os = origins.handedOut(r, block.streamed());
        if (os == null) { // its peer withdrew its node while it was in flight: its blocks went to Spark's path
            releaseBlock();
            return;
        }
        if (block.unregistered()) {
            String why = block.viaEngineReason();
            releaseBlock();
            BlockOrigin o = os.get(0);
            if (why.equals(BlockFetcher.NOT_IN_TABLE) && rt.conf.fallback() == RdmaShuffleConf.Fallback.NEVER) {
                throw failures.fetchFailed(o, new FetchFailure(r, "executor " + o.address().executorId()
                        + " does not hold map output " + o.mapIndex() + " in its output table (migrated there by "
                        + "decommissioning, or lost) and fallback=never keeps readers off Spark's path", null));
            }
            rt.reads.noteEnginePath(o.address().executorId(), why, why.equals(BlockFetcher.NOT_IN_TABLE));
            sparkPath.later(os);
            return;
        }
        if (!block.streamed()) { // a streamed block counts its windows when it is released
            metrics.incRemoteReqsDuration(TimeUnit.NANOSECONDS.toMillis(block.readNanos()));
        }
        sliceOrigins = os;
        nextSlice = 0;
        checkSlices();
    }

    /**
     * A failure out of the fetcher: this executor's node failed (every block not taken yet through Spark's
     * path), the peer withdrew its node (its blocks through Spark's path), or the peer is blamed — through
     * Spark's client instead when an external shuffle service serves the rest.
     */
    private void fetchFailed(FetchFailure f) {
        ReadOutcome outcome = classifier.failed(f);
        if (outcome == ReadOutcome.OWN_NODE_FAILED) {
            ownNodeFailed(f);
            return;
        }
        if (outcome == ReadOutcome.ENGINE_PATH) {
            peerToSparkPath(f.request().peer());
            return;
        }
        BlockOrigin o = origins.blame(f);
        if (o == null) {
            if (f.isResult()) {
                return; // a request whose blocks went through Spark's path since (its peer withdrew its node)
            }
            throw new IllegalStateException("a fetch failure names no block of this task: " + f.getMessage(), f);
        }
        if (sparkAfterFailure) {
            rt.remote.forgetPeer(o.address().executorId(), o.peer(), shuffleId); // fetchFailed does it otherwise
            rt.directory.removed(o.address().executorId()); // later tasks skip it if it is gone
            // An external shuffle service serves every executor's files, also of one that just went
            // (released by dynamic allocation, killed): the rest comes through Spark's client.
            rt.reads.noteEnginePath(o.address().executorId(), "a READ from it failed (" + f.getMessage()
                    + "); this task's remaining blocks come through Spark's client and the external "
                    + "shuffle service", true);
            abandonReads();
            return;
        }
        throw failures.fetchFailed(o, f);
    }

    /**
     * A failure of the block taken last before any of its records were handed on (a size the tracker does not
     * allow, corrupt again, its first window): blamed, or — when this executor's node failed or the peer withdrew
     * its node — the block's slices from {@code fromSlice} on (none decoded yet) go through Spark's path, with the
     * peer's other blocks not READ yet (or, for this executor's node, every block not READ yet).
     *
     * @return the exception to throw when the peer is blamed, else null (the block was released)
     */
    private RuntimeException blockFailed(BlockOrigin o, FetchFailure f, ReadOutcome outcome, int fromSlice) {
        if (outcome == ReadOutcome.BLAME_PEER) {
            return failures.fetchFailed(o, f);
        }
        List<BlockOrigin> rest = List.copyOf(sliceOrigins.subList(fromSlice, sliceOrigins.size()));
        NodeAddress peer = block.request().peer();
        releaseBlock();
        sparkPath.later(rest);
        if (outcome == ReadOutcome.OWN_NODE_FAILED) {
            ownNodeFailed(f);
        } else {
            peerToSparkPath(peer);
        }
        return null;
    }

    /** The peer withdrew its node: this task's blocks of it not READ yet go through Spark's path. */
    private void peerToSparkPath(NodeAddress peer) {
        for (List<BlockOrigin> os : origins.removePeer(peer)) {
            sparkPath.later(os);
        }
    }

    /**
     * Checks each slice of the block just fetched against what the tracker says of it, before any is
     * decoded: a block the tracker lists holds from 1 byte to the most its reported size allows, and the
     * partitions between them (reported empty) hold nothing. A mismatch fails the fetch naming that block (unless
     * the peer withdrew its node or this executor's failed: then the block goes through Spark's path).
     */
    private void checkSlices() {
        BlockFetcher.Request r = block.request();
        long listed = 0;
        for (BlockOrigin o : sliceOrigins) {
            int p = o.blockId().reduceId();
            long bytes = block.offsetOf(p + 1) - block.offsetOf(p);
            if (bytes < 1 || bytes > mostBytes(o)) {
                FetchFailure f = new FetchFailure(r, FetchFailure.Kind.SIZE, "map output at peer does not match "
                        + "MapOutputTracker: block " + o.blockId() + " holds " + bytes + " bytes there, the "
                        + "tracker's size allows 1 to " + mostBytes(o) + " (map index " + o.mapIndex()
                        + " at " + o.peer() + ")", null, false);
                sizeMismatch(o, f);
                return;
            }
            listed += bytes;
        }
        if (listed != block.length()) {
            BlockOrigin o = sliceOrigins.get(0);
            long unlisted = block.length() - listed;
            sizeMismatch(o, new FetchFailure(r, FetchFailure.Kind.SIZE, "map output at peer does not match "
                    + "MapOutputTracker: partitions [" + r.startPartition() + ", " + r.endPartition() + ") hold "
                    + unlisted + " bytes in partitions the tracker reports empty (map index " + o.mapIndex() + " at "
                    + o.peer() + ")", null, false));
        }
    }

    private void sizeMismatch(BlockOrigin o, FetchFailure f) {
        ReadOutcome outcome = classifier.failed(f);
        if (outcome == ReadOutcome.BLAME_PEER) {
            releaseBlock();
        }
        RuntimeException blame = blockFailed(o, f, outcome, 0);
        if (blame != null) {
            throw blame;
        }
    }

    /**
     * Opens the next block of the one taken: its bytes are a slice of the landed buffer, decoded on their
     * own (each block is compressed and encrypted separately), with Spark's read metrics per block — or, with
     * batch fetch, every block of the request as one stream and one block, as Spark's reader fetches a batch.
     * A block whose decoding cannot start (corrupt) is READ again once, alone; corrupt again, it fails the
     * fetch with the cause {@link CorruptionDiagnosis} finds.
     *
     * @return its records, or null when it is READ again
     */
    Iterator<Tuple2<Object, Object>> openNextSlice() {
        List<BlockOrigin> unit = List.copyOf(sliceOrigins.subList(nextSlice, batch ? sliceOrigins.size() : nextSlice + 1));
        nextSlice += unit.size();
        BlockOrigin o = unit.get(0);
        int first = o.blockId().reduceId();
        int end = unit.get(unit.size() - 1).blockId().reduceId() + 1;
        long from = block.offsetOf(first);
        long to = block.offsetOf(end);
        InputStream raw = block.open(from, to);
        if (block.streamed()) {
            // larger than the pool's largest buffer: READ window by window as it is decoded; a window
            // that fails mid-stream fails the fetch naming this block
            raw = firstWindow(raw, unit);
            if (raw == null) {
                return null; // no pool room for it, or its peer withdrew its node: it goes through Spark's path
            }
            raw = new StreamGuard(raw, e -> streamFailed(o, e));
        }
        metrics.incRemoteBlocksFetched(1);
        metrics.incRemoteBytesRead(to - from);
        BlockFetcher.Block landed = block;
        try {
            return decoder.records(o, raw, decoder.decode(o, raw), () -> {
                // mid-stream: the task fails with this block; its buffer goes back before the serving side is asked
                Supplier<String> q = question(landed, unit, from, to);
                if (landed == block) {
                    releaseBlock();
                }
                return q.get();
            });
        } catch (IOException e) {
            long most = 0;
            for (BlockOrigin u : unit) {
                most += mostBytes(u);
            }
            BlockFetcher.Request again = new BlockFetcher.Request(o.peer(), tables.get(o.address()), o.mapIndex(),
                    o.blockId().mapId(), first, end, new BlockFetcher.Expected(numPartitions, unit.size(), most));
            boolean readAgainBefore = !corruptOnce.add(again);
            FetchFailure corrupt = new FetchFailure(again, FetchFailure.Kind.CORRUPT, "block "
                    + BlockOrigin.unitId(unit) + " from " + o.address() + " is corrupt again after a second READ: "
                    + e.getMessage(), e, false);
            ReadOutcome outcome = classifier.corrupt(corrupt, readAgainBefore);
            if (outcome == ReadOutcome.BLAME_PEER) {
                Supplier<String> q = question(landed, unit, from, to);
                releaseBlock(); // before the serving side is asked, which may take Spark's connection timeout
                String why = q.get();
                throw failures.fetchFailed(o, why == null ? corrupt : new FetchFailure(again,
                        FetchFailure.Kind.CORRUPT, why + " (again after a second READ from " + o.address() + ": "
                        + e.getMessage() + ")", e, false));
            }
            if (outcome != ReadOutcome.RETRY) { // nothing of the unit was handed on: Spark's path serves it
                blockFailed(o, corrupt, outcome, nextSlice - unit.size());
                return null;
            }
            // as Spark's reader: the bytes may have been damaged on the way, READ them once more
            LOG.warn("block {} from {} is corrupt ({}); reading it again", BlockOrigin.unitId(unit), o.address(),
                    e.toString());
            origins.add(again, unit);
            addToFetcher(again);
            return null;
        }
    }

    /**
     * Waits for a streamed block's first window before anything of it is decoded: when the pool has no room
     * for it past its acquire timeout (or cannot get memory), no record of the block has been handed on yet,
     * so the block, the rest of the request and every block not READ yet go through Spark's path instead of
     * failing the task. Later windows come while records are handed on, and a failure there fails the task.
     *
     * @return the stream with its first byte at hand, or null when the blocks went to Spark's path
     */
    private InputStream firstWindow(InputStream raw, List<BlockOrigin> unit) {
        PushbackInputStream s = new PushbackInputStream(raw, 1);
        try {
            int b = s.read();
            if (b >= 0) {
                s.unread(b);
            }
            return s;
        } catch (BufferPoolException e) {
            List<BlockOrigin> rest = List.copyOf(sliceOrigins.subList(nextSlice - unit.size(), sliceOrigins.size()));
            releaseBlock();
            sparkPath.later(rest);
            readRestThroughSpark(e); // rethrows what is not the pool's room or the host's memory, or fallback=never
            return null;
        } catch (BlockFetcher.StreamFailed e) {
            // no record of the block was handed on yet: Spark's path can still serve it
            RuntimeException blame = blockFailed(unit.get(0), e.failure(), classifier.failed(e.failure()),
                    nextSlice - unit.size());
            if (blame != null) {
                throw blame;
            }
            return null;
        } catch (IOException e) { // a window's bytes are in memory: reading them cannot fail
            throw new IllegalStateException(e);
        }
    }

    /**
     * Why the block {@code unit} (bytes {@code [from, to)} of {@code landed}) is corrupt, in Spark's words: the
     * checksum of its bytes as they landed is taken now, and its executor is asked when the result is asked for
     * (after the caller gave the buffer back); the result is null when shuffle checksums are off. A
     * batch is not diagnosed (checksums are kept per block, as Spark's reader does not diagnose batches), nor
     * a streamed block, whose windows are gone.
     */
    private Supplier<String> question(BlockFetcher.Block landed, List<BlockOrigin> unit, long from, long to) {
        ShuffleBlockId id = unit.get(0).blockId();
        if (unit.size() > 1) {
            String s = diagnosis.notDiagnosed(id, BlockOrigin.unitId(unit) + " was fetched as a batch; checksums are "
                    + "kept per block");
            return () -> s;
        }
        if (landed != block || landed.streamed()) {
            String s = diagnosis.notDiagnosed(id, "it was READ window by window, larger than a receive buffer, and "
                    + "its bytes as they landed are not kept");
            return () -> s;
        }
        return diagnosis.question(unit.get(0).address(), id, landed.bytes().position((int) from).limit((int) to));
    }

    /**
     * A streamed block's window failed after records of the block were handed on: the FetchFailedException naming
     * the block, or — when this executor's node failed or the peer withdrew its node — a task failure that blames
     * nobody (the block cannot switch to Spark's path midway; the task is retried).
     */
    private RuntimeException streamFailed(BlockOrigin o, BlockFetcher.StreamFailed e) {
        NodeAddress peer = o.peer();
        releaseBlock(); // every window buffer back now
        ReadOutcome outcome = classifier.failed(e.failure());
        if (outcome == ReadOutcome.OWN_NODE_FAILED) {
            rt.nodeFailureSeen();
            return new IllegalStateException("this executor's RDMA node failed while block " + o.blockId()
                    + " was streamed (" + rt.failureReason() + "); the task is retried", e);
        }
        if (outcome == ReadOutcome.ENGINE_PATH) {
            peerToSparkPath(peer);
            return new IllegalStateException("executor " + o.address().executorId() + " withdrew its RDMA node while "
                    + "block " + o.blockId() + " was streamed from it; the task is retried, blaming nobody", e);
        }
        return failures.fetchFailed(o, e.failure()); // forgets the peer's cached table and metadata too
    }

    /**
     * When this executor cannot get memory for receive buffers — allocating or registering it failed
     * (a locked-memory or mapping limit of the host, direct memory) — the blocks not yet READ are
     * fetched through Spark's path instead, after the ones already taken: the serving executors'
     * files are Spark's, so nothing is lost and no peer is blamed. Other pool trouble (at its own
     * cap past the acquire timeout, interrupted), or {@code fallback=never}, fails the task.
     * {@code e} null: the READs were given up already and new requests follow the rest.
     */
    private void readRestThroughSpark(BufferPoolException e) {
        ReadOutcome outcome = e == null ? ReadOutcome.ENGINE_PATH : classifier.poolFailed(e);
        if (outcome == ReadOutcome.LOCAL_FAILURE) {
            throw e; // interrupted (a killed task), a size no buffer can hold, or fallback=never
        }
        if (!readsAbandoned && e != null) {
            if (outcome == ReadOutcome.OWN_NODE_FAILED) { // the pool closes with a failed node's runtime
                rt.nodeFailureSeen();
            } else if (e.exhausted()) {
                rt.reads.notePoolExhausted(e);
            } else {
                rt.reads.noteReceiveMemoryUnavailable(e);
            }
        }
        abandonReads();
    }

    /**
     * This executor's own node failed (a transport loop or the device could not go on), which made a READ
     * fail: nobody else is to blame. Every block not taken yet goes through Spark's path.
     */
    private void ownNodeFailed(FetchFailure f) {
        rt.nodeFailureSeen();
        LOG.debug("this executor's node failed ({}); the task's remaining blocks go through Spark's path",
                rt.failureReason(), f);
        abandonReads();
    }

    /**
     * Whether the peer of a failed request withdrew its node (it failed) or replaced it since this task
     * looked it up ({@link FailedReadClassifier.PeerNodes}): then this task's blocks of that peer go through
     * Spark's path. Asks the driver once per peer and task (a no answers again at the next failure).
     */
    private boolean peerWithdrew(BlockFetcher.Request r) {
        String id = peerIds.get(r.peer());
        if (id == null) {
            return false;
        }
        if (withdrawnPeers.contains(id)) {
            return true;
        }
        Long incarnation = incarnations.get(id);
        String why = FetchFailures.nodeWithdrawn(rt, id, r.peer(), incarnation == null ? 0 : incarnation);
        if (why == null) {
            return false;
        }
        withdrawnPeers.add(id);
        rt.remote.forgetPeer(id, r.peer(), shuffleId);
        rt.reads.noteEnginePath(id, why);
        return true;
    }

    /** Every request the fetcher has not handed out goes through Spark's path; no more READs. */
    private void abandonReads() {
        for (List<BlockOrigin> os : origins.removeAll()) {
            sparkPath.later(os);
        }
        if (!readsAbandoned) {
            readsAbandoned = true;
            fetcher.close(); // buffers of READs still in flight come back as they land
        }
    }

    /** Gives the block taken last back (its buffer, or its windows), with its READ metrics if streamed. */
    void releaseBlock() {
        if (block != null) {
            if (block.streamed()) {
                // its windows were READ and waited for while it was decoded, not before it was handed out
                metrics.incFetchWaitTime(TimeUnit.NANOSECONDS.toMillis(block.streamWaitNanos()));
                metrics.incRemoteReqsDuration(TimeUnit.NANOSECONDS.toMillis(block.readNanos()));
            }
            block.close();
            block = null;
        }
        sliceOrigins = null;
    }

    /**
     * Gives the block back, closes the fetcher (buffers of READs in flight come back as they land) and
     * reports its counters. Once only (the caller makes sure).
     */
    @Override
    public void close() {
        releaseBlock();
        fetcher.close();
        rt.reads.addControlBytesRead(fetcher.controlBytesRead());
        rt.reads.addMetadataReadsAgain(fetcher.metadataReadsAgain());
    }
}
