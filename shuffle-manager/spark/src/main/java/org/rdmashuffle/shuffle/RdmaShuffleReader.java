package org.rdmashuffle.shuffle;

import org.rdmashuffle.shuffle.core.*;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.concurrent.TimeUnit;
import org.apache.spark.InterruptibleIterator;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.network.buffer.ManagedBuffer;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.shuffle.ShuffleReader;
import org.apache.spark.storage.BlockId;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.storage.ShuffleBlockId;
import org.apache.spark.util.TaskCompletionListener;
import org.apache.spark.util.collection.ExternalSorter;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;
import scala.Product2;
import scala.Tuple2;
import scala.Tuple3;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.collection.JavaConverters;

/**
 * A reduce task's reader: remote blocks with one-sided READs (every request handed to the
 * {@link BlockFetcher} up front, which posts them within its budget, so fetching overlaps decoding),
 * local blocks straight from disk (read while the remote ones are in flight), each decoded through
 * Spark's SerializerManager and the shuffle's serializer, then aggregated and sorted as Spark's own
 * reader does. Reports Spark's shuffle read metrics and merges them into the task's when done. A
 * block that cannot be fetched becomes a {@code FetchFailedException} naming its map and reduce ids,
 * so Spark reruns the map stage.
 */
final class RdmaShuffleReader<K, C> implements ShuffleReader<K, C> {
    private static final Logger LOG = LoggerFactory.getLogger(RdmaShuffleReader.class);

    private final RdmaShuffleManager manager;
    private final RdmaShuffleHandle handle;
    private final int startMapIndex;
    private final int endMapIndex;
    private final int startPartition;
    private final int endPartition;
    private final TaskContext context;
    private final ShuffleReadMetricsReporter metrics;

    /**
     * Where a block comes from, for metrics and for the FetchFailedException that names it, and the size
     * the MapOutputTracker reports for it. {@code peer} is its executor's node: null for a local block,
     * and for a remote one before the node is looked up.
     */
    private record Origin(BlockManagerId address, NodeAddress peer, ShuffleBlockId blockId, int mapIndex,
                          long reportedBytes, Tuple3<BlockId, Object, Object> tracked) {
    }

    RdmaShuffleReader(RdmaShuffleManager manager, RdmaShuffleHandle handle, int startMapIndex, int endMapIndex,
                      int startPartition, int endPartition, TaskContext context, ShuffleReadMetricsReporter metrics) {
        this.manager = manager;
        this.handle = handle;
        this.startMapIndex = startMapIndex;
        this.endMapIndex = endMapIndex;
        this.startPartition = startPartition;
        this.endPartition = endPartition;
        this.context = context;
        this.metrics = metrics;
    }

    private Iterator<Product2<K, C>> sortRead() {
        return manager.<K, C>sortReader(handle, startMapIndex, endMapIndex, startPartition, endPartition, context,
                metrics).read();
    }

    /**
     * The {@code FetchFailedException} for a block. When the block was being READ (its origin names the
     * peer's node: lost peer, lying metadata, a failed stream window, corrupt bytes), this executor also
     * forgets what it cached of that node: the directory's address of the executor, and the node's output
     * table and metadata for this shuffle, so that a rerun asks and READs them afresh. Never starts the
     * runtime (it may be stopping).
     */
    private RuntimeException fetchFailed(Origin o, FetchFailure f) {
        ExecutorRuntime rt;
        if (o.peer() != null && (rt = manager.startedRuntime()) != null) {
            rt.remote.forgetPeer(o.address().executorId(), o.peer(), handle.shuffleId());
        }
        return SparkInterop.sneakyThrow(SparkInterop.fetchFailed(o.address(), handle.shuffleId(), o.blockId().mapId(),
                o.mapIndex(), o.blockId().reduceId(), f));
    }

    @Override
    @SuppressWarnings("deprecation") // scala.collection.JavaConverters: the one converter Scala 2.12 and 2.13 share
    public Iterator<Product2<K, C>> read() {
        ExecutorRuntime rt = manager.runtime();
        if (rt == null) {
            return sortRead(); // this executor's transport could not start (logged once)
        }
        int shuffleId = handle.shuffleId();
        boolean localFromDisk = rt.conf.localBlocksFromDisk();
        boolean never = rt.conf.fallback() == RdmaShuffleConf.Fallback.NEVER;
        String ourProvider = rt.node.localAddress().provider();
        // With an external shuffle service, a removed executor's files are still served (by the service):
        // its blocks go through Spark's client, the other executors' by READ.
        boolean ess = SparkInterop.externalShuffleService(SparkEnv.get().conf());
        if (ess) {
            rt.remote.refreshRemoved(); // at most once a second per executor
        }
        List<Origin> local = new ArrayList<>();
        List<Origin> remote = new ArrayList<>();
        Map<BlockManagerId, RegionDescriptor> tables = new HashMap<>();
        Map<String, Long> incarnations = new HashMap<>(); // of the peers' nodes READ from, by executor
        // Blocks of peers that cannot serve READs to this executor: fetched as Spark's reader fetches them.
        Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> viaSpark = new LinkedHashMap<>();
        Iterator<Tuple2<BlockManagerId, scala.collection.Seq<Tuple3<BlockId, Object, Object>>>> byAddress =
                SparkEnv.get().mapOutputTracker().getMapSizesByExecutorId(shuffleId, startMapIndex, endMapIndex,
                        startPartition, endPartition);
        while (byAddress.hasNext()) {
            Tuple2<BlockManagerId, scala.collection.Seq<Tuple3<BlockId, Object, Object>>> entry = byAddress.next();
            BlockManagerId bm = entry._1();
            List<Origin> blocks = new ArrayList<>();
            for (Tuple3<BlockId, Object, Object> b : JavaConverters.seqAsJavaList(entry._2())) {
                if ((Long) b._2() != 0) { // an empty block has nothing to read, as in Spark's reader
                    blocks.add(new Origin(bm, null, (ShuffleBlockId) b._1(), (Integer) b._3(), (Long) b._2(), b));
                }
            }
            if (blocks.isEmpty()) {
                continue;
            }
            if (localFromDisk && bm.executorId().equals(rt.executorId)) {
                local.addAll(blocks);
                continue;
            }
            PeerDirectory.Found found = rt.directory.find(bm.executorId());
            NodeAddress peer = found.address();
            String why = null;
            if (found.removed() || (ess && rt.directory.knownRemoved(bm.executorId()))) {
                why = "Spark removed executor " + bm.executorId() + " at " + bm.hostPort();
                if (!ess || never) {
                    throw fetchFailed(blocks.get(0), new FetchFailure(null, why + (ess ? " (an external shuffle "
                            + "service serves its files, but fallback=never keeps readers off Spark's path)"
                            : " and no external shuffle service serves its files"), null));
                }
                rt.reads.noteSparkPath(bm.executorId(), why + "; the external shuffle service serves its files", true);
                viaSpark.put(bm, tracked(blocks));
                continue;
            }
            if (peer == null) {
                why = "executor " + bm.executorId() + " at " + bm.hostPort() + " serves no RDMA node (its transport "
                        + "did not start)";
            } else if (!peer.provider().equals(ourProvider)) {
                why = "executor " + bm.executorId() + " at " + bm.hostPort() + " serves over the " + peer.provider()
                        + " provider, this executor reads over " + ourProvider;
            }
            if (why != null) {
                if (never) {
                    throw fetchFailed(blocks.get(0), new FetchFailure(null, why + " (fallback=never)", null));
                }
                rt.reads.noteSparkPath(bm.executorId(), why);
                viaSpark.put(bm, tracked(blocks));
                continue;
            }
            RegionDescriptor table;
            try {
                table = rt.remote.table(bm.executorId(), peer, found.incarnation(), shuffleId);
            } catch (TransportException e) {
                rt.remote.forgetPeer(bm.executorId(), peer, shuffleId);
                if (rt.failed()) {
                    // This executor's own node failed, not the peer's: nothing was read yet, so the whole task
                    // goes through Spark's path and nobody is blamed.
                    rt.nodeFailureSeen();
                    LOG.debug("this executor's node failed ({}); the task reads through Spark's path",
                            rt.failureReason(), e);
                    return sortRead();
                }
                String withdrawn = never ? null : nodeWithdrawn(rt, bm.executorId(), peer, found.incarnation());
                if (withdrawn != null) {
                    rt.reads.noteSparkPath(bm.executorId(), withdrawn);
                    viaSpark.put(bm, tracked(blocks));
                    continue;
                }
                if (ess && !never) { // gone, or going: the external shuffle service serves its files
                    rt.reads.noteSparkPath(bm.executorId(), "its node cannot be reached (" + e.getMessage() + "); the "
                            + "external shuffle service serves its files", true);
                    viaSpark.put(bm, tracked(blocks));
                    continue;
                }
                throw fetchFailed(blocks.get(0), new FetchFailure(null, e.getMessage(), e));
            }
            if (table == null) {
                why = "executor " + bm.executorId() + " holds no output table for shuffle " + shuffleId
                        + " (it registered none of its outputs)";
                if (never) {
                    throw fetchFailed(blocks.get(0), new FetchFailure(null, why + " (fallback=never)", null));
                }
                rt.reads.noteSparkPath(bm.executorId(), why);
                viaSpark.put(bm, tracked(blocks));
                continue;
            }
            tables.put(bm, table);
            incarnations.put(bm.executorId(), found.incarnation());
            for (Origin o : blocks) {
                remote.add(new Origin(bm, peer, o.blockId(), o.mapIndex(), o.reportedBytes(), o.tracked()));
            }
        }
        return decodeAndCombine(new Blocks(rt, local, remote, tables, incarnations, viaSpark, ess && !never));
    }

    /**
     * Why {@code executorId}'s node at {@code peer}, which could not be reached, is not to blame — it failed
     * and left the driver's directory, or was replaced by a new one — asked of the driver afresh (at most
     * 5 s); null when the directory still names {@code peer} (or cannot be asked, or Spark removed the
     * executor): then the executor failed to serve, and a fetch failure names it.
     */
    private static String nodeWithdrawn(ExecutorRuntime rt, String executorId, NodeAddress peer, long incarnation) {
        PeerDirectory.Found now = rt.directory.recheck(executorId);
        if (now == null || now.removed() || now.names(peer, incarnation)) {
            return null;
        }
        return now.address() == null
                ? "its node " + peer + " failed and left the driver's directory"
                : "its node " + peer + " failed and was replaced by " + now.address();
    }

    /**
     * Cuts consecutive blocks into runs fetched by one request each: a run's upper bounds sum to at most
     * {@code cap}, except a run of one block, which may exceed it.
     *
     * @param bounds the most bytes each block may hold, in file order
     * @return the exclusive end index of each run, in order
     */
    static int[] runEnds(long[] bounds, long cap) {
        int[] ends = new int[bounds.length];
        int runs = 0;
        long sum = 0;
        for (int i = 0; i < bounds.length; i++) {
            if (i > 0 && (sum > cap || bounds[i] > cap - sum)) {
                ends[runs++] = i;
                sum = 0;
            }
            sum = bounds[i] > Long.MAX_VALUE - sum ? Long.MAX_VALUE : sum + bounds[i];
        }
        if (bounds.length > 0) {
            ends[runs++] = bounds.length;
        }
        return java.util.Arrays.copyOf(ends, runs);
    }

    private static List<Tuple3<BlockId, Object, Object>> tracked(List<Origin> blocks) {
        List<Tuple3<BlockId, Object, Object>> out = new ArrayList<>(blocks.size());
        for (Origin o : blocks) {
            out.add(o.tracked());
        }
        return out;
    }

    /** Every record of the task's blocks: local ones first (while remote ones are fetched), then remote. */
    private final class Blocks extends AbstractIterator<Product2<Object, Object>> {
        private final ExecutorRuntime rt;
        private final List<Origin> local;
        /** The blocks of each request the fetcher has not handed out yet, in partition order. */
        private final Map<BlockFetcher.Request, List<Origin>> origins = new HashMap<>();
        private final BlockFetcher fetcher;
        private final SparkEnv env = SparkEnv.get();
        private final ShuffleDependency<K, Object, C> dep = handle.dependency();
        private final org.apache.spark.serializer.SerializerInstance serializer = dep.serializer().newInstance();
        /** Records of local blocks between two polls of the fetcher for pool room freed elsewhere. */
        private static final int LOCAL_RECORDS_PER_PROGRESS = 1024;
        private int nextLocal;
        private InputStream localStream;
        /** Local records read since the fetcher last had a chance to move (only while reading local blocks). */
        private int localRecords;
        private BlockFetcher.Block block;
        /** The blocks {@link #block} holds, decoded one after the other, and the next one's index. */
        private List<Origin> sliceOrigins;
        private int nextSlice;
        private Iterator<Tuple2<Object, Object>> current;
        private boolean finished;
        private final boolean detectCorrupt = SparkInterop.detectCorrupt(env.conf());
        private final boolean detectCorruptEarly = SparkInterop.detectCorruptUseExtraMemory(env.conf());
        /** Remote blocks found corrupt once and READ again; a second time fails the fetch. */
        private final java.util.Set<BlockFetcher.Request> corruptOnce = new java.util.HashSet<>();

        /** Spark's own fetcher over blocks that are not READ, or null. */
        private Iterator<Tuple2<BlockId, InputStream>> sparkBlocks;
        /** Set once the READs were given up for want of receive memory: the fetcher is closed. */
        private boolean readsAbandoned;
        /** Blocks whose serving executor left them unregistered, found while READing: fetched by Spark's path last. */
        private Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> unregistered = new LinkedHashMap<>();
        private InputStream sparkStream;
        /** A failed READ sends the task's remaining blocks through Spark's client (an external shuffle service). */
        private final boolean sparkAfterFailure;
        /** The incarnation of each peer's node this task READs from, by executor. */
        private final Map<String, Long> incarnations;
        /** Peers whose node failed and left the directory (or was replaced) while this task READ from them. */
        private final java.util.Set<String> withdrawnPeers = new java.util.HashSet<>();

        Blocks(ExecutorRuntime rt, List<Origin> local, List<Origin> remote, Map<BlockManagerId, RegionDescriptor> tables,
               Map<String, Long> incarnations, Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> viaSpark,
               boolean sparkAfterFailure) {
            this.rt = rt;
            this.incarnations = incarnations;
            this.sparkAfterFailure = sparkAfterFailure;
            this.local = local;
            this.fetcher = new BlockFetcher(rt.node, rt.pool, rt.remote.metadataCache(handle.shuffleId()),
                    rt.conf.maxBytesInFlight(), rt.conf.maxReadsInFlightPerPeer(), rt.conf.readBlockSizeBytes(),
                    rt.conf.requestTimeoutMs());
            context.addTaskCompletionListener((TaskCompletionListener) c -> finish());
            this.tables = tables;
            this.numPartitions = dep.partitioner().numPartitions();
            this.rangeBytes = rt.pool.options().maxBufferBytes();
            // A map output's blocks of this task's partitions lie one after the other in its data file: one
            // request fetches a run of them (AQE coalescing), up to a buffer's worth by the most bytes the tracker
            // allows each block — not its reported size: past spark.shuffle.minNumPartitionsToHighlyCompress a
            // MapStatus reports the map's average for every block under the accurate-size threshold, and a run
            // grouped by averages could hold gigabytes. There every block goes alone, as before merging.
            Map<List<Object>, List<Origin>> byOutput = new LinkedHashMap<>();
            for (Origin o : remote) {
                byOutput.computeIfAbsent(List.of(o.address(), o.mapIndex(), o.blockId().mapId()),
                        k -> new ArrayList<>()).add(o);
            }
            for (List<Origin> blocks : byOutput.values()) {
                blocks.sort(java.util.Comparator.comparingInt(o -> o.blockId().reduceId()));
                long[] bounds = new long[blocks.size()];
                for (int i = 0; i < bounds.length; i++) {
                    bounds[i] = mostBytes(blocks.get(i));
                }
                int from = 0;
                for (int to : runEnds(bounds, rangeBytes)) {
                    addToFetcher(blocks.subList(from, to));
                    from = to;
                }
            }
            if (!viaSpark.isEmpty()) {
                sparkBlocks = fetchThroughSpark(viaSpark); // fetching starts now
            }
        }

        private final Map<BlockManagerId, RegionDescriptor> tables;
        private final int numPartitions;
        /** Bytes (the tracker's upper bounds) one request for several blocks of a map output covers at most. */
        private final long rangeBytes;

        /** The most bytes the tracker allows block {@code o}; never 0, as empty blocks are not fetched. */
        private long mostBytes(Origin o) {
            return SparkInterop.mostBytesOfBlock(o.reportedBytes(), numPartitions, env.conf());
        }

        /**
         * Queues one request for {@code blocks}: consecutive blocks (by reduce id) of one map output, whose
         * partitions from the first to the last lie one after the other in its data file. Partitions
         * between them that the tracker reports empty must hold no bytes at the peer ({@link #openSlice}).
         */
        private void addToFetcher(List<Origin> blocks) {
            Origin first = blocks.get(0);
            long most = 0;
            for (Origin o : blocks) {
                long m = mostBytes(o);
                most = m > Long.MAX_VALUE - most ? Long.MAX_VALUE : most + m;
            }
            // Reported sizes are never 0 here (empty blocks are skipped), and a MapStatus reports 0 only for
            // empty blocks: each block holds at least one byte.
            BlockFetcher.Expected expected = new BlockFetcher.Expected(numPartitions, blocks.size(), most);
            BlockFetcher.Request r = new BlockFetcher.Request(first.peer(), tables.get(first.address()),
                    first.mapIndex(), first.blockId().mapId(), first.blockId().reduceId(),
                    blocks.get(blocks.size() - 1).blockId().reduceId() + 1, expected);
            origins.put(r, List.copyOf(blocks));
            addToFetcher(r);
        }

        private Iterator<Tuple2<BlockId, InputStream>> fetchThroughSpark(
                Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> blocks) {
            long n = 0;
            for (List<Tuple3<BlockId, Object, Object>> l : blocks.values()) {
                n += l.size();
            }
            rt.reads.countBlocksViaSpark(n);
            return SparkInterop.fetchThroughSpark(context, blocks, metrics);
        }

        // hasNext and next run once per record: they stay small, and what happens once per block (open,
        // fetch, release) lives in advance() and takeUpLanded(), which the JIT leaves out of them. Inlined,
        // that code made C2 spend 0.4-0.8 s of an executor's CPU compiling hasNext alone (JFR, main job).
        @Override
        public boolean hasNext() {
            Iterator<Tuple2<Object, Object>> c = current;
            return c != null && c.hasNext() || advance();
        }

        /** Moves to the next block that has records (opening, fetching, releasing); false when none is left. */
        private boolean advance() {
            while (current == null || !current.hasNext()) {
                if (block != null && nextSlice < sliceOrigins.size()) {
                    closeStreams();
                    current = openSlice(); // null for a block READ again
                    continue;
                }
                releaseCurrent();
                if (nextLocal < local.size()) {
                    progressFetcher(); // post the remote blocks' next READs between local ones
                    current = openLocal(local.get(nextLocal++));
                } else if (!readsAbandoned && fetcher.outstanding() > 0) {
                    // READ blocks first: their buffers are the executor's shared pool, while Spark's
                    // fetcher (started at once) holds its own memory until its blocks are taken
                    current = nextRemote(); // null for a block its executor left unregistered
                } else if (sparkBlocks != null && sparkBlocks.hasNext()) {
                    Tuple2<BlockId, InputStream> b = sparkBlocks.next(); // decoded; Spark's own corruption checks
                    sparkStream = b._2();
                    current = SparkInterop.records(serializer, sparkStream);
                } else if (!unregistered.isEmpty()) {
                    sparkBlocks = fetchThroughSpark(unregistered);
                    unregistered = new LinkedHashMap<>();
                } else {
                    finish();
                    return false;
                }
            }
            return true;
        }

        @Override
        public Product2<Object, Object> next() {
            if (!hasNext()) {
                throw new NoSuchElementException();
            }
            metrics.incRecordsRead(1);
            if (localStream != null && !readsAbandoned
                    && (fetcher.hasLanded() || ++localRecords == LOCAL_RECORDS_PER_PROGRESS)) {
                takeUpLanded();
            }
            return current.next();
        }

        /**
         * A large local block must not hold back the remote ones' next READs (slot, metadata, data): takes up
         * what landed at once, and looks for freed pool room now and then. No allocation.
         */
        private void takeUpLanded() {
            localRecords = 0;
            progressFetcher();
        }

        private Iterator<Tuple2<Object, Object>> openLocal(Origin o) {
            InputStream decoded;
            try {
                ManagedBuffer data = manager.shuffleBlockResolver().getBlockData(o.blockId(), Option.empty());
                localStream = data.createInputStream();
                metrics.incLocalBlocksFetched(1);
                metrics.incLocalBytesRead(data.size());
                decoded = decode(o, localStream);
            } catch (IOException | RuntimeException e) {
                // as Spark's reader: a local block that cannot be opened or decoded fails the fetch at once
                throw fetchFailed(o, new FetchFailure(null, "cannot read local block " + o.blockId() + ": "
                        + e.getMessage(), e));
            }
            return SparkInterop.records(serializer, guard(o, localStream, decoded));
        }

        private Iterator<Tuple2<Object, Object>> nextRemote() {
            long t0 = System.nanoTime();
            try {
                block = fetcher.next();
            } catch (BufferPoolException e) {
                readRestThroughSpark(e);
                return null;
            } catch (FetchFailure f) { // the peer's fault, unless this executor's own node failed
                if (rt.failed()) {
                    ownNodeFailed(f);
                    return null;
                }
                Origin o = blame(f);
                if (f.isResult() && o.peer() != null && rt.conf.fallback() != RdmaShuffleConf.Fallback.NEVER
                        && peerWithdrew(o)) {
                    List<Tuple3<BlockId, Object, Object>> l = unregistered.computeIfAbsent(o.address(),
                            a -> new ArrayList<>());
                    for (Origin each : origins.remove(f.request())) {
                        l.add(each.tracked());
                    }
                    return null;
                }
                if (sparkAfterFailure) {
                    rt.remote.forgetPeer(o.address().executorId(), o.peer(), handle.shuffleId()); // fetchFailed does it otherwise
                    rt.directory.removed(o.address().executorId()); // later tasks skip it if it is gone
                    // An external shuffle service serves every executor's files, also of one that just went
                    // (released by dynamic allocation, killed): the rest comes through Spark's client.
                    rt.reads.noteSparkPath(o.address().executorId(), "a READ from it failed (" + f.getMessage()
                            + "); this task's remaining blocks come through Spark's client and the external "
                            + "shuffle service", true);
                    abandonReads();
                    return null;
                }
                throw fetchFailed(o, f);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted while fetching shuffle blocks", e);
            } finally {
                metrics.incFetchWaitTime(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
            }
            BlockFetcher.Request r = block.request();
            List<Origin> os = origins.remove(r); // handed out: origins keeps only the requests still to come
            if (block.unregistered()) {
                String why = block.viaSparkReason();
                releaseCurrent();
                Origin o = os.get(0);
                if (why.equals(BlockFetcher.NOT_IN_TABLE) && rt.conf.fallback() == RdmaShuffleConf.Fallback.NEVER) {
                    throw fetchFailed(o, new FetchFailure(r, "executor " + o.address().executorId() + " does not "
                            + "hold map output " + o.mapIndex() + " in its output table (migrated there by "
                            + "decommissioning, or lost) and fallback=never keeps readers off Spark's path", null));
                }
                rt.reads.noteSparkPath(o.address().executorId(), why, why.equals(BlockFetcher.NOT_IN_TABLE));
                List<Tuple3<BlockId, Object, Object>> l = unregistered.computeIfAbsent(o.address(),
                        a -> new ArrayList<>());
                for (Origin each : os) {
                    l.add(each.tracked());
                }
                return null;
            }
            if (!block.streamed()) { // a streamed block counts its windows when it is released
                metrics.incRemoteReqsDuration(TimeUnit.NANOSECONDS.toMillis(block.readNanos()));
            }
            sliceOrigins = os;
            nextSlice = 0;
            checkSlices();
            return null; // hasNext opens the block's slices one by one
        }

        /**
         * Checks each slice of the block just fetched against what the tracker says of it, before any is
         * decoded: a block the tracker lists holds from 1 byte to the most its reported size allows, and the
         * partitions between them (reported empty) hold nothing. A mismatch fails the fetch naming that block.
         */
        private void checkSlices() {
            BlockFetcher.Request r = block.request();
            long listed = 0;
            for (Origin o : sliceOrigins) {
                int p = o.blockId().reduceId();
                long bytes = block.offsetOf(p + 1) - block.offsetOf(p);
                if (bytes < 1 || bytes > mostBytes(o)) {
                    Origin failed = o;
                    releaseCurrent();
                    throw fetchFailed(failed, new FetchFailure(r, "map output at peer does not match "
                            + "MapOutputTracker: block " + failed.blockId() + " holds " + bytes + " bytes there, the "
                            + "tracker's size allows 1 to " + mostBytes(failed) + " (map index " + failed.mapIndex()
                            + " at " + failed.peer() + ")", null));
                }
                listed += bytes;
            }
            if (listed != block.length()) {
                Origin o = sliceOrigins.get(0);
                long unlisted = block.length() - listed;
                releaseCurrent();
                throw fetchFailed(o, new FetchFailure(r, "map output at peer does not match MapOutputTracker: "
                        + "partitions [" + r.startPartition() + ", " + r.endPartition() + ") hold " + unlisted
                        + " bytes in partitions the tracker reports empty (map index " + o.mapIndex() + " at "
                        + o.peer() + ")", null));
            }
        }

        /**
         * Opens the next block of {@link #block}: its bytes are a slice of the landed buffer, decoded on
         * their own (each block is compressed and encrypted separately), with Spark's read metrics per
         * block. A block whose decoding cannot start (corrupt) is READ again once, alone.
         *
         * @return its records, or null when it is READ again
         */
        private Iterator<Tuple2<Object, Object>> openSlice() {
            Origin o = sliceOrigins.get(nextSlice++);
            int p = o.blockId().reduceId();
            long from = block.offsetOf(p);
            long to = block.offsetOf(p + 1);
            metrics.incRemoteBlocksFetched(1);
            metrics.incRemoteBytesRead(to - from);
            InputStream raw = block.open(from, to);
            if (block.streamed()) {
                // larger than the pool's largest buffer: READ window by window as it is decoded; a window
                // that fails mid-stream fails the fetch naming this block
                raw = new StreamGuard(o, raw);
            }
            try {
                return SparkInterop.records(serializer, guard(o, raw, decode(o, raw)));
            } catch (IOException e) {
                BlockFetcher.Request again = new BlockFetcher.Request(o.peer(), tables.get(o.address()), o.mapIndex(),
                        o.blockId().mapId(), p, p + 1, new BlockFetcher.Expected(numPartitions, 1, mostBytes(o)));
                if (!corruptOnce.add(again)) {
                    releaseCurrent();
                    throw fetchFailed(o, new FetchFailure(again, "block " + o.blockId() + " from " + o.address()
                            + " is corrupt again after a second READ: " + e.getMessage(), e));
                }
                // as Spark's reader: the bytes may have been damaged on the way, READ them once more
                LOG.warn("block {} from {} is corrupt ({}); reading it again", o.blockId(), o.address(), e.toString());
                origins.put(again, List.of(o));
                addToFetcher(again);
                return null;
            }
        }

        /**
         * Spark's decryption and decompression around a block's bytes, and with
         * {@code spark.shuffle.detectCorrupt.useExtraMemory} its first {@code maxBytesInFlight / 3}
         * decoded bytes at once, as Spark's reader does.
         */
        private InputStream decode(Origin o, InputStream raw) throws IOException {
            InputStream decoded = SparkInterop.decoded(env.serializerManager(), o.blockId(), raw);
            if (decoded != raw && detectCorruptEarly) {
                decoded = SparkInterop.decodeAhead(decoded, Math.max(1, rt.conf.maxBytesInFlight() / 3));
            }
            return decoded;
        }

        /**
         * With {@code spark.shuffle.detectCorrupt} and a compressed or encrypted block, an
         * {@code IOException} while its records are read (a corrupt byte) becomes the
         * {@code FetchFailedException} Spark's reader throws, naming the block's map output, so Spark
         * reruns that map instead of failing the task until the job aborts.
         */
        private InputStream guard(Origin o, InputStream raw, InputStream decoded) {
            return decoded == raw || !detectCorrupt ? decoded : new CorruptionGuard(o, decoded);
        }

        /** Turns a streamed block's failed window into the FetchFailedException naming the block. */
        private final class StreamGuard extends java.io.FilterInputStream {
            private final Origin origin;

            StreamGuard(Origin origin, InputStream raw) {
                super(raw);
                this.origin = origin;
            }

            private RuntimeException failed(BlockFetcher.StreamFailed e) {
                Origin o = origin;
                releaseCurrent(); // every window buffer back now
                if (rt.failed()) {
                    // This executor's node failed mid-block: records of the block were handed on already, so it
                    // cannot switch to Spark's path; the task fails (and is retried) without blaming the peer.
                    rt.nodeFailureSeen();
                    return new IllegalStateException("this executor's RDMA node failed while block " + o.blockId()
                            + " was streamed (" + rt.failureReason() + "); the task is retried", e);
                }
                return fetchFailed(o, e.failure()); // forgets the peer's cached table and metadata too
            }

            @Override
            public int read() throws IOException {
                try {
                    return in.read();
                } catch (BlockFetcher.StreamFailed e) {
                    throw failed(e);
                }
            }

            @Override
            public int read(byte[] b, int off, int len) throws IOException {
                try {
                    return in.read(b, off, len);
                } catch (BlockFetcher.StreamFailed e) {
                    throw failed(e);
                }
            }

            @Override
            public long skip(long n) throws IOException {
                try {
                    return in.skip(n);
                } catch (BlockFetcher.StreamFailed e) {
                    throw failed(e);
                }
            }

            @Override
            public void close() {
                // the block's windows are given back when the block is closed
            }
        }

        private final class CorruptionGuard extends java.io.FilterInputStream {
            private final Origin origin;

            CorruptionGuard(Origin origin, InputStream decoded) {
                super(decoded);
                this.origin = origin;
            }

            private RuntimeException corrupt(IOException e) {
                return fetchFailed(origin, new FetchFailure(null, "block " + origin.blockId() + " from "
                        + origin.address() + " is corrupt: " + e.getMessage(), e));
            }

            @Override
            public int read() {
                try {
                    return in.read();
                } catch (IOException e) {
                    throw corrupt(e);
                }
            }

            @Override
            public int read(byte[] b, int off, int len) {
                try {
                    return in.read(b, off, len);
                } catch (IOException e) {
                    throw corrupt(e);
                }
            }

            @Override
            public long skip(long n) {
                try {
                    return in.skip(n);
                } catch (IOException e) {
                    throw corrupt(e);
                }
            }

            @Override
            public int available() {
                try {
                    return in.available();
                } catch (IOException e) {
                    throw corrupt(e);
                }
            }
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

        private void progressFetcher() {
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
         * When this executor cannot get memory for receive buffers — allocating or registering it failed
         * (a locked-memory or mapping limit of the host, direct memory) — the blocks not yet READ are
         * fetched through Spark's path instead, after the ones already taken: the serving executors'
         * files are Spark's, so nothing is lost and no peer is blamed. Other pool trouble (at its own
         * cap past the acquire timeout, interrupted), or {@code fallback=never}, fails the task.
         * {@code e} null: the READs were given up already and new requests follow the rest.
         */
        private void readRestThroughSpark(BufferPoolException e) {
            boolean nodeFailed = rt.failed(); // the pool closes with a failed node's runtime
            if (e != null && (rt.conf.fallback() == RdmaShuffleConf.Fallback.NEVER
                    || !(e.memoryUnavailable() || e.exhausted() || nodeFailed))) {
                throw e; // interrupted (a killed task), a size no buffer can hold, or fallback=never
            }
            if (!readsAbandoned && e != null) {
                if (nodeFailed) {
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
         * looked it up: then that request — and any later failure of this task's READs from that peer — goes
         * through Spark's path. Asks the driver once per peer and task.
         */
        private boolean peerWithdrew(Origin o) {
            String id = o.address().executorId();
            if (withdrawnPeers.contains(id)) {
                return true;
            }
            Long incarnation = incarnations.get(id);
            String why = nodeWithdrawn(rt, id, o.peer(), incarnation == null ? 0 : incarnation);
            if (why == null) {
                return false;
            }
            withdrawnPeers.add(id);
            rt.remote.forgetPeer(id, o.peer(), handle.shuffleId());
            rt.reads.noteSparkPath(id, why);
            return true;
        }

        /** Every request the fetcher has not handed out goes through Spark's path; no more READs. */
        private void abandonReads() {
            for (List<Origin> os : origins.values()) {
                for (Origin o : os) {
                    unregistered.computeIfAbsent(o.address(), a -> new ArrayList<>()).add(o.tracked());
                }
            }
            origins.clear();
            if (!readsAbandoned) {
                readsAbandoned = true;
                fetcher.close(); // buffers of READs still in flight come back as they land
            }
        }

        /**
         * The origin a failure names, else that of the oldest block still outstanding. A failure is a
         * result for a request not handed out yet, so {@code origins} still holds it (never empty here).
         */
        private Origin blame(FetchFailure f) {
            List<Origin> os = f.request() == null ? null : origins.get(f.request());
            if (os == null) {
                BlockFetcher.Request oldest = fetcher.oldestOutstanding();
                os = oldest == null ? null : origins.get(oldest);
            }
            return (os != null ? os : origins.values().iterator().next()).get(0);
        }

        private void releaseCurrent() {
            closeStreams();
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

        /** Closes the stream records are being read from (a local block's, Spark's fetcher's); not {@link #block}. */
        private void closeStreams() {
            current = null;
            if (localStream != null) {
                try {
                    localStream.close();
                } catch (IOException e) {
                    LOG.debug("closing a local shuffle block's stream failed", e);
                }
                localStream = null;
            }
            if (sparkStream != null) {
                try {
                    sparkStream.close(); // gives Spark's fetcher its buffer back
                } catch (IOException e) {
                    LOG.debug("closing a shuffle block's stream from Spark's fetcher failed", e);
                }
                sparkStream = null;
            }
        }

        /** Releases everything and merges the metrics into the task's; safe to call again. */
        private void finish() {
            if (finished) {
                return;
            }
            finished = true;
            releaseCurrent();
            fetcher.close();
            rt.reads.addControlBytesRead(fetcher.controlBytesRead());
            rt.reads.addMetadataReadsAgain(fetcher.metadataReadsAgain());
            context.taskMetrics().mergeShuffleReadMetrics();
        }
    }

    /**
     * Aggregates and sorts as Spark's reader does. Records are read through an
     * {@link InterruptibleIterator}, so a killed task stops reading (and aggregating and sorting) at
     * its next record, not after its last.
     */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private Iterator<Product2<K, C>> decodeAndCombine(Iterator<Product2<Object, Object>> blockRecords) {
        Iterator<Product2<Object, Object>> records = new InterruptibleIterator<>(context, blockRecords);
        ShuffleDependency<K, Object, C> dep = handle.dependency();
        Iterator<Product2<K, C>> result;
        if (dep.aggregator().isDefined()) {
            if (dep.mapSideCombine()) {
                result = (Iterator) dep.aggregator().get().combineCombinersByKey((Iterator) records, context);
            } else {
                result = (Iterator) dep.aggregator().get().combineValuesByKey((Iterator) records, context);
            }
        } else {
            result = (Iterator) records;
        }
        if (dep.keyOrdering().isDefined()) {
            ExternalSorter<K, C, C> sorter = SparkInterop.sorter(context, dep.keyOrdering(), dep.serializer());
            result = sorter.insertAllAndUpdateMetrics((Iterator) result);
        }
        return result instanceof InterruptibleIterator ? result : new InterruptibleIterator<>(context, result);
    }
}
