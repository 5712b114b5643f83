package org.rdmashuffle.shuffle;

import java.util.ArrayList;
import java.util.HashMap;
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
import org.apache.spark.util.collection.ExternalSorter;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;
import scala.Option;
import scala.Product2;
import scala.Tuple2;
import scala.Tuple3;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Reads a reduce task's blocks with one-sided READs (every block, local ones too, for now), decodes
 * them through Spark's SerializerManager and the shuffle's serializer, then aggregates and sorts as
 * Spark's own reader does.
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

    private record Origin(BlockManagerId address, BlockId blockId, long mapId, int mapIndex, int reduceId) {
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

    @Override
    @SuppressWarnings({"unchecked", "rawtypes"})
    public Iterator<Product2<K, C>> read() {
        ShuffleDependency<K, Object, C> dep = handle.dependency();
        SparkEnv env = SparkEnv.get();
        ExecutorRuntime rt = manager.runtime();
        BlockFetcher fetcher = new BlockFetcher(rt.node, rt.pool, rt.conf.maxBytesInFlight(),
                rt.conf.readBlockSizeBytes(), rt.conf.requestTimeoutMs());
        context.addTaskCompletionListener((org.apache.spark.util.TaskCompletionListener) c -> fetcher.close());
        Map<BlockFetcher.Request, Origin> origins = new HashMap<>();
        Iterator<Tuple2<BlockManagerId, scala.collection.Seq<Tuple3<BlockId, Object, Object>>>> byAddress =
                env.mapOutputTracker().getMapSizesByExecutorId(handle.shuffleId(), startMapIndex, endMapIndex,
                        startPartition, endPartition);
        List<Tuple2<BlockFetcher.Request, Origin>> requests = new ArrayList<>();
        while (byAddress.hasNext()) {
            Tuple2<BlockManagerId, scala.collection.Seq<Tuple3<BlockId, Object, Object>>> entry = byAddress.next();
            BlockManagerId bm = entry._1();
            NodeAddress peer = null;
            RegionDescriptor table = null;
            for (Tuple3<BlockId, Object, Object> b : CollectionConverters.asJava(entry._2())) {
                ShuffleBlockId id = (ShuffleBlockId) b._1();
                long size = (Long) b._2();
                int mapIndex = (Integer) b._3();
                Origin origin = new Origin(bm, id, id.mapId(), mapIndex, id.reduceId());
                if (size == 0) {
                    continue;
                }
                try {
                    if (peer == null) {
                        peer = rt.directory.lookup(bm.executorId());
                        if (peer == null) {
                            throw new TransportException("executor " + bm.executorId() + " has no RDMA node registered");
                        }
                        table = rt.remoteTable(peer, handle.shuffleId());
                    }
                } catch (TransportException e) {
                    throw SparkInterop.sneakyThrow(SparkInterop.fetchFailed(bm, handle.shuffleId(), id.mapId(),
                            mapIndex, id.reduceId(), new FetchFailure(null, e.getMessage(), e)));
                }
                BlockFetcher.Request r = new BlockFetcher.Request(peer, table, mapIndex, id.reduceId(),
                        id.reduceId() + 1);
                requests.add(new Tuple2<>(r, origin));
            }
        }
        for (Tuple2<BlockFetcher.Request, Origin> t : requests) {
            origins.put(t._1(), t._2());
            fetcher.add(t._1());
        }
        Iterator<Product2<Object, Object>> records = new AbstractIterator<>() {
            private Iterator<Tuple2<Object, Object>> current;
            private BlockFetcher.Block block;

            @Override
            public boolean hasNext() {
                while (current == null || !current.hasNext()) {
                    if (block != null) {
                        block.close();
                        block = null;
                    }
                    if (fetcher.outstanding() == 0) {
                        return false;
                    }
                    long t0 = System.nanoTime();
                    try {
                        block = fetcher.next();
                    } catch (FetchFailure f) {
                        Origin o = f.request() == null ? null : origins.get(f.request());
                        if (o == null) {
                            o = origins.values().iterator().next();
                        }
                        throw SparkInterop.sneakyThrow(SparkInterop.fetchFailed(o.address(), handle.shuffleId(),
                                o.mapId(), o.mapIndex(), o.reduceId(), f));
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new IllegalStateException("interrupted while fetching shuffle blocks", e);
                    }
                    metrics.incFetchWaitTime(java.util.concurrent.TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
                    Origin o = origins.get(block.request());
                    if (o.address().executorId().equals(rt.executorId)) {
                        metrics.incLocalBlocksFetched(1);
                        metrics.incLocalBytesRead(block.length());
                    } else {
                        metrics.incRemoteBlocksFetched(1);
                        metrics.incRemoteBytesRead(block.length());
                    }
                    current = SparkInterop.records(env.serializerManager(), dep.serializer(), o.blockId(), block.bytes());
                }
                return true;
            }

            @Override
            public Product2<Object, Object> next() {
                if (!hasNext()) {
                    throw new java.util.NoSuchElementException();
                }
                metrics.incRecordsRead(1);
                return current.next();
            }
        };
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
            ExternalSorter<K, C, C> sorter = new ExternalSorter<>(context, Option.empty(), Option.empty(),
                    dep.keyOrdering(), dep.serializer(), new org.apache.spark.shuffle.checksum.RowBasedChecksum[0]);
            result = sorter.insertAllAndUpdateMetrics((Iterator) result);
        }
        return new InterruptibleIterator<>(context, result);
    }
}
