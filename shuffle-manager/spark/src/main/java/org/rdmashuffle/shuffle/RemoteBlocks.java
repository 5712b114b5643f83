package org.rdmashuffle.shuffle;

import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkConf;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.storage.BlockManagerId;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.FailedReadClassifier;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.transport.RegionDescriptor;
import scala.Tuple2;
import scala.collection.Iterator;

/**
 * A reduce task's blocks READ from peers: every request handed to its {@link BlockFetcher} up front (a run
 * of consecutive blocks of one map output per request, {@link RequestPlanner}), which posts them within its
 * budget, so fetching overlaps decoding; each block landed is checked against the MapOutputTracker and opened
 * slice by slice ({@link TakenBlock}; a block whose decoding cannot start is READ again once, alone). Blocks that
 * cannot be READ are handed to {@link SparkPathBlocks}: left unregistered at their peer, of a peer that withdrew
 * its node, or — when this executor runs out of receive memory or pool room, or its own node failed — every block
 * not READ yet.
 *
 * <p>Threads: everything here runs on the task thread; the fetcher's READs complete on the transport's
 * completion threads, which only land bytes and wake the task ({@link BlockFetcher#next}). The maintenance
 * thread is only asked to withdraw this executor's node when it is found failed.
 *
 * <p>Failures: what to do about a failed request ({@link #takeNext}), a block that does not match the tracker, a
 * corrupt block ({@link #openNextSlice}) or a streamed window that failed is decided by the core's
 * {@link FailedReadClassifier} — this executor's own node failed, the peer withdrew its node (asked of the
 * driver's directory, {@link FetchFailures#nodeWithdrawn}, for every failure that would blame it), READ again, or
 * blame the peer — and turned into Spark's words by the {@link ReadOutcomeTranslator} alone: Spark's path for the
 * blocks, or {@link FetchFailures#fetchFailed} (unless an external shuffle service serves the rest).
 */
final class RemoteBlocks implements AutoCloseable {
    /** Records of local blocks between two polls of the fetcher for pool room freed elsewhere. */
    private static final int LOCAL_RECORDS_PER_PROGRESS = 1024;

    private final ExecutorRuntime rt;
    private final ShuffleReadMetricsReporter metrics;
    private final BlockFetcher fetcher;
    /** The blocks of each request, and the origin a failure concerns. */
    private final RequestOrigins origins = new RequestOrigins();
    private final RequestPlanner requests;
    private final ReadOutcomeTranslator outcomes;
    private final TakenBlock taken;
    /** Local records read since the fetcher last had a chance to move. */
    private int localRecords;

    /**
     * Opens the fetcher (from the runtime's node and pool); requests follow with {@link #queue}.
     *
     * @param tables the output table of each peer READ from
     * @param incarnations the incarnation of each peer's node this task READs from, by executor
     * @param batch each request's blocks are decoded as one block, as Spark's batch fetch does
     * @param sparkAfterFailure a failed READ sends the task's remaining blocks through Spark's client (an external
     *     shuffle service serves them)
     */
    RemoteBlocks(ExecutorRuntime rt, int shuffleId, int numPartitions, SparkConf sparkConf,
                 Map<BlockManagerId, RegionDescriptor> tables, Map<String, Long> incarnations, boolean batch,
                 boolean sparkAfterFailure, FetchFailures failures, BlockDecoder decoder,
                 CorruptionDiagnosis diagnosis, ShuffleReadMetricsReporter metrics, SparkPathBlocks sparkPath) {
        this.rt = rt;
        this.metrics = metrics;
        this.fetcher = new BlockFetcher(rt.node, rt.pool, rt.remote.metadataCache(shuffleId),
                rt.conf.maxBytesInFlight(), rt.conf.maxReadsInFlightPerPeer(), rt.conf.readBlockSizeBytes(),
                rt.conf.requestTimeoutMs());
        this.requests = new RequestPlanner(numPartitions, sparkConf, tables, rt.pool.options().maxBufferBytes());
        this.outcomes = new ReadOutcomeTranslator(rt, shuffleId, failures, sparkPath, fetcher, origins, requests,
                incarnations, sparkAfterFailure);
        this.taken = new TakenBlock(requests, outcomes, this::addToFetcher, decoder, diagnosis, metrics, batch);
    }

    /** Hands every request for {@code remote} to the fetcher, a run of a map output's blocks each. */
    void queue(List<BlockOrigin> remote) {
        for (List<BlockOrigin> run : requests.runs(remote)) {
            addToFetcher(requests.request(run), List.copyOf(run));
        }
    }

    /** Hands {@code r}, whose blocks are {@code blocks}, to the fetcher (or Spark's path, the READs given up). */
    private void addToFetcher(BlockFetcher.Request r, List<BlockOrigin> blocks) {
        origins.add(r, blocks);
        if (outcomes.readsAbandoned()) {
            outcomes.readRestThroughSpark(null);
            return;
        }
        try {
            fetcher.add(r);
        } catch (BufferPoolException e) {
            outcomes.readRestThroughSpark(e);
        }
    }

    /** Lets the fetcher post its next READs (between local blocks). */
    void progress() {
        if (outcomes.readsAbandoned()) {
            return;
        }
        try {
            fetcher.progress();
        } catch (BufferPoolException e) {
            outcomes.readRestThroughSpark(e);
        }
    }

    /**
     * After each record of a local block: a large local block must not hold back the remote ones' next READs
     * (slot, metadata, data): takes up what landed at once, and looks for freed pool room now and then. No
     * allocation.
     */
    void afterLocalRecord() {
        if (!outcomes.readsAbandoned() && (fetcher.hasLanded() || ++localRecords == LOCAL_RECORDS_PER_PROGRESS)) {
            localRecords = 0;
            progress();
        }
    }

    /** Whether requests are still to be handed out by the fetcher. */
    boolean hasOutstanding() {
        return !outcomes.readsAbandoned() && fetcher.outstanding() > 0;
    }

    /** Whether the block taken last has slices not opened yet. */
    boolean hasMoreSlices() {
        return taken.hasMoreSlices();
    }

    /**
     * Takes the next block from the fetcher (waiting for it), checked against the tracker; its slices are
     * opened with {@link #openNextSlice}. A block its executor left unregistered, or a failure that blames
     * nobody, hands blocks to Spark's path instead.
     */
    void takeNext() {
        BlockFetcher.Block block;
        long t0 = System.nanoTime();
        try {
            block = fetcher.next();
        } catch (BufferPoolException e) {
            outcomes.readRestThroughSpark(e);
            return;
        } catch (FetchFailure f) {
            outcomes.fetchFailed(f);
            return;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while fetching shuffle blocks", e);
        } finally {
            metrics.incFetchWaitTime(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
        }
        taken.take(block, origins.handedOut(block.request(), block.streamed()));
    }

    /**
     * Opens the next block of the one taken ({@link TakenBlock#openNextSlice}).
     *
     * @return its records, or null when it is READ again or went to Spark's path
     */
    Iterator<Tuple2<Object, Object>> openNextSlice() {
        return taken.openNextSlice();
    }

    /** Gives the block taken last back (its buffer, or its windows), with its READ metrics if streamed. */
    void releaseBlock() {
        taken.release();
    }

    /**
     * Gives the block back, closes the fetcher (buffers of READs in flight come back as they land) and
     * reports its counters. Once only (the caller makes sure).
     */
    @Override
    public void close() {
        taken.close();
        fetcher.close();
        rt.reads.addControlBytesRead(fetcher.controlBytesRead());
        rt.reads.addMetadataReadsAgain(fetcher.metadataReadsAgain());
        rt.reads.addBuffersWithheld(fetcher.buffersWithheld());
    }
}
