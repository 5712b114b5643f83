package org.rdmashuffle.shuffle;

import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.storage.BlockId;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.util.TaskCompletionListener;
import org.rdmashuffle.transport.RegionDescriptor;
import scala.Product2;
import scala.Tuple2;
import scala.Tuple3;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;

/**
 * Every record of a reduce task's blocks, from three sources one after the other: local blocks from disk
 * first ({@link LocalBlocks}, read while the remote ones are in flight), then the blocks READ from peers
 * ({@link RemoteBlocks}), then those fetched by Spark's own fetcher ({@link SparkPathBlocks}: other
 * executors' blocks on this host, read from their disk; peers that cannot serve READs; blocks handed over
 * while READing). One block is open at a time. Counts records
 * read; merges the task's shuffle read metrics when done.
 *
 * <p>Threads: a task's iterator, used on its task thread only; {@link #close} also runs from the task's
 * completion listener (on the task thread, when the task ends early or fails). READs complete on the
 * transport's completion threads inside the fetcher. Blames nobody itself: the sources do, through
 * {@link FetchFailures#fetchFailed}.
 *
 * <p>Sources are made in this order: local, Spark's path, remote (its fetcher opened); the fetch through
 * Spark's path starts last. Closed in reverse: the open block's stream (Spark's or a local one), then the
 * remote block and the fetcher.
 */
final class TaskBlocks extends AbstractIterator<Product2<Object, Object>> implements AutoCloseable {
    private final TaskContext context;
    private final ShuffleReadMetricsReporter metrics;
    private final LocalBlocks local;
    private final SparkPathBlocks sparkPath;
    private final RemoteBlocks remote;
    private Iterator<Tuple2<Object, Object>> current;
    private boolean closed;

    /**
     * @param local blocks written on this executor, read from disk
     * @param remoteBlocks blocks READ from peers, their nodes looked up
     * @param tables the output table of each peer READ from
     * @param incarnations the incarnation of each peer's node READ from, by executor
     * @param viaSpark blocks of peers that cannot serve READs to this executor
     * @param fromHostDisk blocks of other executors on this host, read from their disk by Spark's fetcher
     * @param batch each map output's run of consecutive blocks is fetched and decoded as one block, as
     *     Spark's reader does ({@link SparkInterop#batchFetch})
     * @param sparkAfterFailure a failed READ sends the remaining blocks through Spark's client (an external
     *     shuffle service serves every executor's files)
     */
    TaskBlocks(RdmaShuffleManager manager, ExecutorRuntime rt, int shuffleId, ShuffleDependency<?, ?, ?> dep,
               TaskContext context, ShuffleReadMetricsReporter metrics, FetchFailures failures,
               List<BlockOrigin> local, List<BlockOrigin> remoteBlocks, Map<BlockManagerId, RegionDescriptor> tables,
               Map<String, Long> incarnations, Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> viaSpark,
               Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> fromHostDisk, boolean batch,
               boolean sparkAfterFailure) {
        this.context = context;
        this.metrics = metrics;
        SparkEnv env = SparkEnv.get();
        BlockDecoder decoder = new BlockDecoder(env, dep.serializer().newInstance(),
                rt.conf.maxBytesInFlight());
        CorruptionDiagnosis diagnosis = new CorruptionDiagnosis(env);
        this.local = new LocalBlocks(local, batch, manager.shuffleBlockResolver(), diagnosis, decoder, failures, metrics);
        this.sparkPath = new SparkPathBlocks(context, metrics, rt.reads, decoder, batch);
        this.remote = new RemoteBlocks(rt, shuffleId, dep.partitioner().numPartitions(), env.conf(), tables,
                incarnations, batch, sparkAfterFailure, failures, decoder, diagnosis, metrics, sparkPath);
        context.addTaskCompletionListener((TaskCompletionListener) c -> close());
        remote.queue(remoteBlocks);
        sparkPath.start(viaSpark, fromHostDisk); // fetching starts now
    }

    // hasNext and next run once per record: they stay small, and what happens once per block (open,
    // fetch, release) lives in advance() and the sources, which the JIT leaves out of them. Inlined,
    // that code made C2 spend 0.4-0.8 s of an executor's CPU compiling hasNext alone (JFR, main job).
    @Override
    public boolean hasNext() {
        Iterator<Tuple2<Object, Object>> c = current;
        return c != null && c.hasNext() || advance();
    }

    /** Moves to the next block that has records (opening, fetching, releasing); false when none is left. */
    private boolean advance() {
        while (current == null || !current.hasNext()) {
            if (remote.hasMoreSlices()) {
                closeStreams();
                current = remote.openNextSlice(); // null for a block READ again
                continue;
            }
            closeStreams();
            remote.releaseBlock();
            if (local.hasNext()) {
                remote.progress(); // post the remote blocks' next READs between local ones
                current = local.openNext();
            } else if (remote.hasOutstanding()) {
                // READ blocks first: their buffers are the executor's shared pool, while Spark's
                // fetcher (started at once) holds its own memory until its blocks are taken
                remote.takeNext(); // its slices are opened above; none for a block left unregistered
            } else if ((current = sparkPath.openNext()) == null) {
                close();
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
        if (local.reading()) {
            remote.afterLocalRecord();
        }
        return current.next();
    }

    /** Closes the stream records are being read from (a local block's, Spark's fetcher's); not a READ block. */
    private void closeStreams() {
        current = null;
        local.closeStream();
        sparkPath.closeStream();
    }

    /** Releases everything and merges the metrics into the task's; safe to call again. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        current = null;
        try {
            sparkPath.close();
            local.close();
        } finally {
            try {
                remote.close();
            } finally {
                context.taskMetrics().mergeShuffleReadMetrics();
            }
        }
    }
}
