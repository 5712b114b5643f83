package org.rdmashuffle.shuffle;

import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.TaskContext;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.storage.BlockId;
import org.apache.spark.storage.BlockManagerId;
import org.rdmashuffle.shuffle.core.fetch.ReadAccounting;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Tuple2;
import scala.Tuple3;
import scala.collection.Iterator;

/**
 * A reduce task's blocks that are not READ, fetched by Spark's own fetcher (which reports Spark's metrics
 * and checks corruption itself): those of other executors on this host (which it reads from their disk,
 * {@code spark.shuffle.readHostLocalDisk}) and of peers that cannot serve READs to this executor, started at once,
 * and those handed over while READing ({@link #later}: left unregistered at their peer, of a peer that
 * withdrew its node, or every block not READ yet once the READs were given up), fetched after the rest.
 * On the task thread; Spark's fetcher runs its own threads. Blames nobody: Spark's fetcher throws its own
 * FetchFailedException.
 */
final class SparkPathBlocks implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(SparkPathBlocks.class);

    private final TaskContext context;
    private final ShuffleReadMetricsReporter metrics;
    private final ReadAccounting reads;
    private final BlockDecoder decoder;
    /** Whether Spark's fetcher fetches each map output's run of blocks as one ({@link SparkInterop#batchFetch}). */
    private final boolean batch;
    /** Spark's own fetcher over blocks that are not READ, or null. */
    private Iterator<Tuple2<BlockId, InputStream>> fetching;
    /** Blocks handed over while READing: fetched by Spark's path last. */
    private Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> later = new LinkedHashMap<>();
    /** The open block's stream (Spark's fetcher's buffer), or null. */
    private InputStream stream;

    SparkPathBlocks(TaskContext context, ShuffleReadMetricsReporter metrics, ReadAccounting reads,
                    BlockDecoder decoder, boolean batch) {
        this.batch = batch;
        this.context = context;
        this.metrics = metrics;
        this.reads = reads;
        this.decoder = decoder;
    }

    /**
     * Starts fetching, in one Spark fetcher, {@code now} — blocks taken through Spark's path from the start —
     * and {@code fromHostDisk} — blocks of other executors on this host, which Spark's fetcher reads from
     * their disk (counted apart: not a fallback). Both empty: nothing.
     */
    void start(Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> now,
               Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> fromHostDisk) {
        if (now.isEmpty() && fromHostDisk.isEmpty()) {
            return;
        }
        long n = 0;
        for (List<Tuple3<BlockId, Object, Object>> l : fromHostDisk.values()) {
            n += l.size();
        }
        reads.countHostLocalBlocks(n);
        Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> all = new LinkedHashMap<>(now);
        all.putAll(fromHostDisk); // different executors: no key in both
        countViaSpark(now);
        fetching = SparkInterop.fetchThroughSpark(context, all, metrics, batch);
    }

    /** Hands {@code block} of the executor at {@code address} to Spark's path, fetched after the rest. */
    void later(BlockManagerId address, Tuple3<BlockId, Object, Object> block) {
        later.computeIfAbsent(address, a -> new ArrayList<>()).add(block);
    }

    /** As {@link #later(BlockManagerId, Tuple3)}, for each of {@code blocks}. */
    void later(List<BlockOrigin> blocks) {
        for (BlockOrigin o : blocks) {
            later(o.address(), o.tracked());
        }
    }

    private Iterator<Tuple2<BlockId, InputStream>> fetch(
            Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> blocks) {
        countViaSpark(blocks);
        // Never batched: blocks handed over while READing come in no file order and with gaps (other requests of
        // the same map output may have been READ already), and Spark's batching assumes a sorted, gap-free run
        // per map output — batched, a block could come twice or not at all.
        return SparkInterop.fetchThroughSpark(context, blocks, metrics, false);
    }

    private void countViaSpark(Map<BlockManagerId, List<Tuple3<BlockId, Object, Object>>> blocks) {
        long n = 0;
        for (List<Tuple3<BlockId, Object, Object>> l : blocks.values()) {
            n += l.size();
        }
        reads.countBlocksViaEngine(n);
    }

    /**
     * Opens the next block Spark's fetcher hands out (decoded, checked by Spark), starting the fetch of the
     * blocks handed over {@link #later} once the others are taken; the caller closes the previous one first.
     *
     * @return its records, or null when no block is left
     */
    Iterator<Tuple2<Object, Object>> openNext() {
        for (;;) {
            if (fetching != null && fetching.hasNext()) {
                Tuple2<BlockId, InputStream> b = fetching.next(); // decoded; Spark's own corruption checks
                stream = b._2();
                return decoder.records(stream);
            }
            if (later.isEmpty()) {
                return null;
            }
            fetching = fetch(later);
            later = new LinkedHashMap<>();
        }
    }

    /** Closes the open block's stream, if any: gives Spark's fetcher its buffer back. */
    void closeStream() {
        if (stream != null) {
            try {
                stream.close();
            } catch (IOException e) {
                LOG.debug("closing a shuffle block's stream from Spark's fetcher failed", e);
            }
            stream = null;
        }
    }

    @Override
    public void close() {
        closeStream();
    }
}
