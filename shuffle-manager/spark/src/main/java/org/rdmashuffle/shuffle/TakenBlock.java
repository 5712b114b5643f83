package org.rdmashuffle.shuffle;

import java.io.IOException;
import java.io.InputStream;
import java.io.PushbackInputStream;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.Supplier;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.storage.ShuffleBlockId;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.shuffle.core.fetch.ReadOutcome;
import org.rdmashuffle.transport.NodeAddress;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Tuple2;
import scala.collection.Iterator;

/**
 * The block a reduce task took last from its {@link BlockFetcher}, opened slice by slice: checked against the
 * MapOutputTracker when taken ({@link #take}), each of its Spark blocks then decoded on its own — or, with batch
 * fetch, all as one ({@link #openNextSlice}) — and given back ({@link #release}) with its READ metrics. A block
 * whose decoding cannot start is READ again once, alone (through the {@code readAgain} given), when the core's
 * classifier says {@code RETRY}. A failure of the block — a size the tracker does not allow, corrupt again, a
 * streamed window — is decided by the core (asked through the {@link ReadOutcomeTranslator}) and turned into
 * Spark's words by the translator alone; this class only says which blocks it concerns and gives the block back
 * first (before a serving executor is asked why its bytes are corrupt). Task thread only.
 */
final class TakenBlock implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(TakenBlock.class);

    private final RequestPlanner requests;
    private final ReadOutcomeTranslator outcomes;
    /** Hands a request, with its blocks, to the fetcher: a corrupt block READ again. */
    private final BiConsumer<BlockFetcher.Request, List<BlockOrigin>> readAgain;
    private final BlockDecoder decoder;
    private final CorruptionDiagnosis diagnosis;
    private final ShuffleReadMetricsReporter metrics;
    /** Each request's blocks are decoded as one block, as Spark's batch fetch does ({@link SparkInterop#batchFetch}). */
    private final boolean batch;
    /** Remote blocks found corrupt once and READ again; a second time fails the fetch. */
    private final Set<BlockFetcher.Request> corruptOnce = new HashSet<>();
    private BlockFetcher.Block block;
    /** The blocks {@link #block} holds, decoded one after the other, and the next one's index. */
    private List<BlockOrigin> sliceOrigins;
    private int nextSlice;

    TakenBlock(RequestPlanner requests, ReadOutcomeTranslator outcomes,
               BiConsumer<BlockFetcher.Request, List<BlockOrigin>> readAgain, BlockDecoder decoder,
               CorruptionDiagnosis diagnosis, ShuffleReadMetricsReporter metrics, boolean batch) {
        this.requests = requests;
        this.outcomes = outcomes;
        this.readAgain = readAgain;
        this.decoder = decoder;
        this.diagnosis = diagnosis;
        this.metrics = metrics;
        this.batch = batch;
    }

    /** Whether the block taken last has slices not opened yet. */
    boolean hasMoreSlices() {
        return block != null && nextSlice < sliceOrigins.size();
    }

    /**
     * Takes {@code b}, just out of the fetcher, whose blocks are {@code os} (null when they went to Spark's path
     * while it was in flight, its peer having withdrawn its node): checked against the tracker, its slices are
     * then opened with {@link #openNextSlice}. A block its executor left unregistered hands its blocks to
     * Spark's path instead.
     */
    void take(BlockFetcher.Block b, List<BlockOrigin> os) {
        block = b;
        if (os == null) { // its peer withdrew its node while it was in flight: its blocks went to Spark's path
            release();
            return;
        }
        if (b.unregistered()) {
            String why = b.viaEngineReason();
            release();
            outcomes.unregistered(b.request(), os, why);
            return;
        }
        if (!b.streamed()) { // a streamed block counts its windows when it is released
            metrics.incRemoteReqsDuration(TimeUnit.NANOSECONDS.toMillis(b.readNanos()));
        }
        sliceOrigins = os;
        nextSlice = 0;
        checkSlices();
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
            if (bytes < 1 || bytes > requests.mostBytes(o)) {
                FetchFailure f = new FetchFailure(r, FetchFailure.Kind.SIZE, "map output at peer does not match "
                        + "MapOutputTracker: block " + o.blockId() + " holds " + bytes + " bytes there, the "
                        + "tracker's size allows 1 to " + requests.mostBytes(o) + " (map index " + o.mapIndex()
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
        ReadOutcome outcome = outcomes.failed(f);
        if (outcome == ReadOutcome.BLAME_PEER) {
            release();
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
            return decoder.records(raw, decoder.decode(o, raw), e -> {
                // mid-stream: the task fails with this block (records of it were handed on); its buffer goes back
                // before the serving side is asked, the checksum of its bytes as they landed taken first
                Supplier<String> q = question(landed, unit, from, to);
                if (landed == block) {
                    release();
                }
                return outcomes.corruptMidDecode(o, landed.request(), e, q);
            });
        } catch (IOException e) {
            BlockFetcher.Request again = requests.again(unit);
            boolean readAgainBefore = !corruptOnce.add(again);
            FetchFailure corrupt = new FetchFailure(again, FetchFailure.Kind.CORRUPT, "block "
                    + BlockOrigin.unitId(unit) + " from " + o.address() + " is corrupt again after a second READ: "
                    + e.getMessage(), e, false);
            ReadOutcome outcome = outcomes.corrupt(corrupt, readAgainBefore);
            if (outcome == ReadOutcome.BLAME_PEER) {
                Supplier<String> q = question(landed, unit, from, to);
                release(); // before the serving side is asked, which may take Spark's connection timeout
                String why = q.get();
                throw outcomes.blame(o, why == null ? corrupt : new FetchFailure(again,
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
            readAgain.accept(again, unit);
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
            release();
            outcomes.firstWindowPoolFailed(rest, e);
            return null;
        } catch (BlockFetcher.StreamFailed e) {
            // no record of the block was handed on yet: Spark's path can still serve it
            RuntimeException blame = blockFailed(unit.get(0), e.failure(), outcomes.failed(e.failure()),
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
     * A failure of this block before any of its records were handed on (a size the tracker does not allow,
     * corrupt again, its first window), as the core decided it ({@code outcome}): the exception blaming the peer,
     * or — when this executor's node failed or the peer withdrew its node — the block given back and its slices
     * from {@code fromSlice} on (none decoded yet) handed to the translator for Spark's path.
     *
     * @return the exception to throw when the peer is blamed, else null (the block was released)
     */
    private RuntimeException blockFailed(BlockOrigin o, FetchFailure f, ReadOutcome outcome, int fromSlice) {
        if (outcome == ReadOutcome.BLAME_PEER) {
            return outcomes.blame(o, f);
        }
        List<BlockOrigin> rest = List.copyOf(sliceOrigins.subList(fromSlice, sliceOrigins.size()));
        NodeAddress peer = block.request().peer();
        release();
        outcomes.notBlamed(outcome, f, rest, peer);
        return null;
    }

    /**
     * A streamed block's window failed after records of the block were handed on: every window buffer back now,
     * then the translator's exception (the block cannot switch to Spark's path midway).
     */
    private RuntimeException streamFailed(BlockOrigin o, BlockFetcher.StreamFailed e) {
        release(); // every window buffer back now
        return outcomes.streamFailed(o, e);
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

    /** Gives the block taken last back (its buffer, or its windows), with its READ metrics if streamed. */
    void release() {
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

    /** As {@link #release}. */
    @Override
    public void close() {
        release();
    }
}
