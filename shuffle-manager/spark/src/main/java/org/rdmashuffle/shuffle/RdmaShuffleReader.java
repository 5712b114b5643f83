package org.rdmashuffle.shuffle;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.InterruptibleIterator;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.shuffle.ShuffleReader;
import org.apache.spark.storage.BlockId;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.storage.ShuffleBlockId;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.shuffle.core.directory.PeerDirectory;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;
import scala.Product2;
import scala.Tuple2;
import scala.Tuple3;
import scala.collection.Iterator;

/**
 * A reduce task's reader: plans where each block comes from — this executor's disk, one-sided READs from
 * the peer's node, or Spark's own fetcher: for peers that cannot serve READs to this executor, and, as
 * Spark's reader does with {@code spark.shuffle.readHostLocalDisk} (on by default), for other executors on
 * this host, whose files it reads from their disk — and reads
 * them through {@link TaskBlocks}, each decoded through Spark's SerializerManager and the shuffle's
 * serializer, then aggregated and sorted as Spark's own reader does. Reports Spark's shuffle read metrics
 * and merges them into the task's when done. A block that cannot be fetched becomes a
 * {@code FetchFailedException} naming its map and reduce ids ({@link FetchFailures#fetchFailed}), so Spark
 * reruns the map stage.
 *
 * <p>Threads: {@link #read} and the records it returns run on the task thread; the READs complete on the
 * transport's completion threads inside the fetcher ({@link RemoteBlocks}); a node found failed is withdrawn
 * on the runtime's maintenance thread. Here a peer is blamed while planning when it serves no READs under
 * {@code fallback=never}, or when its output table cannot be looked up and the core's classifier says to
 * ({@link ReadOutcomeTranslator#tableLookupFailed}: not when this executor's own node failed, nor when the peer
 * withdrew its node).
 */
final class RdmaShuffleReader<K, C> implements ShuffleReader<K, C> {

    private final RdmaShuffleManager manager;
    private final RdmaShuffleHandle handle;
    private final int startMapIndex;
    private final int endMapIndex;
    private final int startPartition;
    private final int endPartition;
    private final TaskContext context;
    private final ShuffleReadMetricsReporter metrics;

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

    @Override
    @SuppressWarnings("deprecation") // scala.collection.JavaConverters: the one converter Scala 2.12 and 2.13 share
    public Iterator<Product2<K, C>> read() {
        ExecutorRuntime rt = manager.runtime();
        if (rt == null) {
            return sortRead(); // this executor's transport could not start (logged once)
        }
        int shuffleId = handle.shuffleId();
        FetchFailures failures = new FetchFailures(manager, shuffleId);
        boolean localFromDisk = rt.conf.localBlocksFromDisk();
        boolean never = rt.conf.fallback() == RdmaShuffleConf.Fallback.NEVER;
        String ourProvider = rt.node.localAddress().provider();
        // With an external shuffle service, a removed executor's files are still served (by the service):
        // its blocks go through Spark's client, the other executors' by READ.
        SparkEnv env = SparkEnv.get();
        boolean ess = SparkInterop.externalShuffleService(env.conf());
        // As Spark's reader: blocks of another executor on this host are read from its disk, not fetched.
        String hostLocal = SparkInterop.readsHostLocalDisk(env) ? env.blockManager().blockManagerId().host() : null;
        if (ess) {
            rt.remote.refreshRemoved(); // at most once a second per executor
        }
        List<BlockOrigin> local = new ArrayList<>();
        List<BlockOrigin> remote = new ArrayList<>();
        Map<BlockManagerId, RegionDescriptor> tables = new HashMap<>();
        Map<String, Long> incarnations = new HashMap<>(); // of the peers' nodes READ from, by executor
        // Blocks of peers that cannot serve READs to this executor: fetched as Spark's reader fetches them.
        Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> viaSpark = new LinkedHashMap<>();
        // Blocks of other executors on this host: Spark's fetcher reads them from their disk.
        Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> fromHostDisk = new LinkedHashMap<>();
        Iterator<Tuple2<BlockManagerId, scala.collection.Seq<Tuple3<BlockId, Object, Object>>>> byAddress =
                env.mapOutputTracker().getMapSizesByExecutorId(shuffleId, startMapIndex, endMapIndex,
                        startPartition, endPartition);
        while (byAddress.hasNext()) {
            Tuple2<BlockManagerId, scala.collection.Seq<Tuple3<BlockId, Object, Object>>> entry = byAddress.next();
            BlockManagerId bm = entry._1();
            List<BlockOrigin> blocks = new ArrayList<>();
            for (Tuple3<BlockId, Object, Object> b : SparkInterop.asJava(entry._2())) {
                if ((Long) b._2() != 0) { // an empty block has nothing to read, as in Spark's reader
                    blocks.add(new BlockOrigin(bm, null, (ShuffleBlockId) b._1(), (Integer) b._3(), (Long) b._2(), b));
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
                    throw failures.fetchFailed(blocks.get(0), new FetchFailure(null, why + (ess ? " (an external shuffle "
                            + "service serves its files, but fallback=never keeps readers off Spark's path)"
                            : " and no external shuffle service serves its files"), null));
                }
                rt.reads.noteEnginePath(bm.executorId(), why + "; the external shuffle service serves its files", true);
                viaSpark.put(bm, BlockOrigin.tracked(blocks));
                continue;
            }
            if (bm.host().equals(hostLocal) && !bm.executorId().equals(rt.executorId)) {
                fromHostDisk.put(bm, BlockOrigin.tracked(blocks));
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
                    throw failures.fetchFailed(blocks.get(0), new FetchFailure(null, why + " (fallback=never)", null));
                }
                rt.reads.noteEnginePath(bm.executorId(), why);
                viaSpark.put(bm, BlockOrigin.tracked(blocks));
                continue;
            }
            RegionDescriptor table;
            try {
                table = rt.remote.table(bm.executorId(), peer, found.incarnation(), shuffleId);
            } catch (TransportException e) {
                rt.remote.forgetPeer(bm.executorId(), peer, shuffleId);
                ReadOutcomeTranslator.LookupFailed to = ReadOutcomeTranslator.tableLookupFailed(rt, failures,
                        blocks.get(0), peer, found.incarnation(), e, ess && !never); // or throws, blaming the peer
                if (to == ReadOutcomeTranslator.LookupFailed.TASK_VIA_SPARK) {
                    return sortRead();
                }
                viaSpark.put(bm, BlockOrigin.tracked(blocks));
                continue;
            }
            if (table == null) {
                why = "executor " + bm.executorId() + " holds no output table for shuffle " + shuffleId
                        + " (it registered none of its outputs)";
                if (never) {
                    throw failures.fetchFailed(blocks.get(0), new FetchFailure(null, why + " (fallback=never)", null));
                }
                rt.reads.noteEnginePath(bm.executorId(), why);
                viaSpark.put(bm, BlockOrigin.tracked(blocks));
                continue;
            }
            tables.put(bm, table);
            incarnations.put(bm.executorId(), found.incarnation());
            for (BlockOrigin o : blocks) {
                remote.add(o.at(peer));
            }
        }
        return decodeAndCombine(new TaskBlocks(manager, rt, shuffleId, handle.dependency(), context, metrics, failures,
                local, remote, tables, incarnations, viaSpark, fromHostDisk,
                SparkInterop.batchFetch(handle.dependency(), startPartition, endPartition, context), ess && !never));
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
            result = SparkInterop.sortedByKey(context, dep.keyOrdering(), dep.serializer(), result);
        }
        return result instanceof InterruptibleIterator ? result : new InterruptibleIterator<>(context, result);
    }
}
