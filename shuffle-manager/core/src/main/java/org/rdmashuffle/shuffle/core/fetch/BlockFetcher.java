package org.rdmashuffle.shuffle.core.fetch;

import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.concurrent.TimeUnit;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.shuffle.core.directory.MetadataCache;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * Fetches ranges of partitions of remote map outputs with one-sided READs only: the map index's
 * slot in the serving executor's {@link ShuffleOutputTable}, then the output's metadata header and
 * region descriptors with only the offsets of the range (the header and descriptors cached in a
 * {@link MetadataCache}, one per shuffle on an executor; a cached request READs its offsets alone),
 * then the bytes, into pooled registered buffers. Finished blocks come out of {@link #next} in
 * completion order, so consuming one overlaps fetching the others.
 *
 * <p>The work is split among package-private classes, each with one job: the phases of each request
 * ({@link RequestStateMachine}), building and posting READs ({@link ReadPoster}), checking what a peer
 * claims ({@link PeerClaims}), the budget ({@link FetchBudget}), who holds and releases each pooled
 * buffer ({@link FetchBuffers}) and blocks that stream ({@link BlockStream}).
 *
 * <p><b>Budget.</b> Every READ counts, slot and metadata READs as well as data READs: at most
 * {@code maxReadsInFlightPerPeer} READs to one peer are posted and not yet taken up by the task, and
 * the pool buffers of READs in flight and of blocks not yet closed take at most {@code maxBytesInFlight}
 * bytes of the pool — a buffer is charged what it takes (its size class), not what its READs need, so a
 * 32-byte slot READ costs the smallest buffer (a step larger than either bound goes alone). Requests
 * beyond the budget wait in this fetcher, not in the channel, so a task with ten thousand blocks from
 * one peer holds a bounded number of buffers and READs.
 *
 * <p><b>Large blocks.</b> A block larger than the pool's largest buffer (also one of more than 2 GiB)
 * is handed out as soon as its offsets are known, {@link Block#streamed() streamed}: its bytes are READ
 * a window of the largest buffer size at a time into at most {@link BlockStream#STREAM_WINDOWS} pooled
 * buffers as {@link Block#open} is read, each buffer going back as soon as it is read (the windows count
 * in the byte budget; one window always goes, so a stream never waits on other blocks' budget).
 *
 * <p><b>Threads.</b> One fetcher serves one reduce task: {@link #add}, {@link #next},
 * {@link #progress} and {@link #close} run on the task's thread (not thread-safe), and that thread
 * does all the work: it acquires buffers, posts READs, parses slots and metadata and posts each
 * request's next READ (slot, then metadata, then data). A completion callback, on the transport's
 * thread, only counts down its step's READs and queues the finished step for the task thread — or,
 * once the fetcher is closed, returns the step's buffer to the pool itself. So no transport thread
 * ever waits for the pool or for room in a channel, and a closed fetcher gives back every buffer,
 * also those of READs that land after {@link #close} ({@link FetchBuffers} states the rule).
 *
 * <p><b>Failures.</b> What goes wrong with a peer (a missing output, a failed READ, metadata or sizes
 * that do not fit what the driver knows) comes out of {@link #next} as a {@link FetchFailure} naming
 * the request. What goes wrong on this executor — the pool exhausted by other tasks, an interrupted
 * wait for it — leaves {@link #add}, {@link #progress} or {@link #next} as a
 * {@link BufferPoolException}, which blames no peer. What the reader then does — READ again, the engine's own
 * path, blame the peer, or nothing because this executor's node failed — is decided once, for every engine, by
 * {@link FailedReadClassifier}.
 */
public final class BlockFetcher implements AutoCloseable {
    /**
     * One block to fetch.
     *
     * @param peer the serving executor's node
     * @param table the descriptor of its output table for this shuffle
     * @param mapIndex the map output's index
     * @param mapId the map task attempt the MapOutputTracker names for it, or {@link #ANY_MAP_ID}
     * @param startPartition first partition, inclusive
     * @param endPartition last partition, exclusive
     * @param expected what the shuffle and the MapOutputTracker say about the block, checked against what
     *     the peer's output table and metadata claim before any buffer is taken for them
     */
    public record Request(NodeAddress peer, RegionDescriptor table, int mapIndex, long mapId, int startPartition,
                          int endPartition, Expected expected, Located located) {
        /** Accept whichever attempt the serving executor published. */
        public static final long ANY_MAP_ID = -1;

        /**
         * @param located where the bytes lie when the peer said so beforehand (then the slot and metadata are not
         *     READ: one data READ step), or null; only for a request of one partition
         */
        public Request {
            if (located != null && endPartition != startPartition + 1) {
                throw new IllegalArgumentException("a located request is of one partition, not [" + startPartition
                        + ", " + endPartition + ")");
            }
        }

        /** A request READing the peer's output table slot and metadata first. */
        public Request(NodeAddress peer, RegionDescriptor table, int mapIndex, long mapId, int startPartition,
                       int endPartition, Expected expected) {
            this(peer, table, mapIndex, mapId, startPartition, endPartition, expected, null);
        }

        /** A request with nothing known beforehand ({@link Expected#UNKNOWN}). */
        public Request(NodeAddress peer, RegionDescriptor table, int mapIndex, long mapId, int startPartition,
                       int endPartition) {
            this(peer, table, mapIndex, mapId, startPartition, endPartition, Expected.UNKNOWN);
        }
    }

    /**
     * Where a block's bytes lie in the peer's registered regions, as the peer said in a control reply (a MapReduce
     * REGISTER): bytes {@code [offset, offset + length)} of {@code regions} laid end to end, every region but the
     * last {@code regionBytes} long. Checked when made, so a lying reply is refused before any READ: no region
     * beyond those the bytes need, none of another length, the bytes inside them. The peer's transport still checks
     * every READ against its region (an rkey deregistered since fails with {@code UNKNOWN_KEY}).
     *
     * @param regions the regions holding the bytes, in order (none for an empty block)
     * @param regionBytes the length of every region but the last
     * @param offset where the bytes start in the first region
     * @param length the block's bytes
     */
    public record Located(RegionDescriptor[] regions, long regionBytes, long offset, long length) {
        public Located {
            String wrong = wrong(regions, regionBytes, offset, length);
            if (wrong != null) {
                throw new IllegalArgumentException("a location that does not hold: " + wrong);
            }
            regions = regions.clone();
        }

        private static String wrong(RegionDescriptor[] regions, long regionBytes, long offset, long length) {
            if (length < 0 || offset < 0) {
                return "bytes [" + offset + ", +" + length + ")";
            }
            if (length == 0) {
                return regions.length == 0 && offset == 0 ? null : "an empty block at " + offset + " in "
                        + regions.length + " regions";
            }
            if (regions.length == 0 || regions.length > ShuffleOutputTable.MAX_REGIONS || regionBytes < 1
                    || regionBytes > Integer.MAX_VALUE) {
                return regions.length + " regions of " + regionBytes + " bytes";
            }
            long total = 0;
            for (int r = 0; r < regions.length; r++) {
                long len = regions[r].length();
                if (r < regions.length - 1 ? len != regionBytes : len < 1 || len > regionBytes) {
                    return "region " + r + " of " + regions.length + " is " + len + " bytes, regions are "
                            + regionBytes;
                }
                total += len;
            }
            long last = regions[regions.length - 1].length();
            if (offset >= regions[0].length() || offset + length > total || offset + length <= total - last) {
                return "bytes [" + offset + ", " + (offset + length) + ") in " + regions.length + " regions of "
                        + total + " bytes";
            }
            return null;
        }

        /** The regions (a copy). */
        @Override
        public RegionDescriptor[] regions() {
            return regions.clone();
        }

        /** As the core's READ path sees it: metadata of these regions, for attempt {@code mapId}. */
        ShuffleOutputTable.Metadata asMetadata(int numPartitions, long mapId) {
            long total = 0;
            for (RegionDescriptor d : regions) {
                total += d.length();
            }
            return new ShuffleOutputTable.Metadata(numPartitions, regions.length == 0 ? Integer.MAX_VALUE
                    : regionBytes, total, regions, mapId, null);
        }
    }

    /**
     * What a block's map output must look like, known from the driver rather than from the peer.
     *
     * @param numPartitions the shuffle's partition count, which fixes the map output's metadata layout
     *     (with the region count from its slot); {@link #UNKNOWN_PARTITIONS} when not known
     * @param minBytes the fewest bytes the block may hold
     * @param maxBytes the most bytes the block may hold
     */
    public record Expected(int numPartitions, long minBytes, long maxBytes) {
        public static final int UNKNOWN_PARTITIONS = -1;
        /** Nothing known: any layout, any size the fetcher can hold. */
        public static final Expected UNKNOWN = new Expected(UNKNOWN_PARTITIONS, 0, Long.MAX_VALUE);

        public Expected {
            if (numPartitions < UNKNOWN_PARTITIONS || minBytes < 0 || maxBytes < minBytes) {
                throw new IllegalArgumentException("impossible expectation: " + numPartitions + " partitions, "
                        + minBytes + " to " + maxBytes + " bytes");
            }
        }
    }

    /** Why a block goes through the engine's path: its peer committed it without registering it. */
    static final String LEFT_UNREGISTERED = "it left map outputs unregistered (see its log)";
    /** Why a block goes through the engine's path: its peer's output table has no entry for the map. */
    public static final String NOT_IN_TABLE = "map outputs the engine locates there are not in its output table (migrated "
            + "there from a decommissioned executor)";

    /**
     * A fetched block — the bytes of the request's partitions, which lie one after the other in the map
     * output: partition {@code p}'s are {@link #bytes()} from {@link #offsetOf offsetOf(p)} to
     * {@code offsetOf(p + 1)}.
     */
    public static final class Block implements AutoCloseable {
        /** Who takes the buffer back when the block is closed. */
        private final FetchBuffers owner;
        private final Request request;
        private final RegisteredBuffer buffer;
        private final long length;
        /** What the block's buffer takes from the pool and so from the byte budget (its capacity). */
        private final long charged;
        private final long readNanos;
        /** For a block larger than the pool's largest buffer: the windows it streams through, else null. */
        private final BlockStream stream;
        private final String viaEngine;
        /**
         * The map output's offsets of partitions {@code startPartition..endPartition} (absolute), or null
         * when the block's partitions between its ends are not needed (one partition, or no bytes).
         */
        private final long[] window;
        private boolean released;

        Block(FetchBuffers owner, Request request, RegisteredBuffer buffer, long length, long readNanos,
              String viaEngine, long[] window, BlockStream stream) {
            this.owner = owner;
            this.request = request;
            this.buffer = buffer;
            this.length = length;
            this.charged = buffer == null ? 0 : buffer.capacity();
            this.readNanos = readNanos;
            this.viaEngine = viaEngine;
            this.window = window;
            this.stream = stream;
        }

        /**
         * Where partition {@code partition} starts in {@link #bytes()}, for a partition from the request's
         * start to its end (inclusive: {@code offsetOf(endPartition)} is {@link #length()}).
         */
        public long offsetOf(int partition) {
            if (partition < request.startPartition() || partition > request.endPartition()) {
                throw new IndexOutOfBoundsException("partition " + partition + " outside [" + request.startPartition()
                        + ", " + request.endPartition() + "]");
            }
            if (partition == request.endPartition()) {
                return length;
            }
            int i = partition - request.startPartition();
            return i == 0 || window == null ? 0 : window[i] - window[0];
        }

        /**
         * Whether the peer does not serve this map attempt by READs — it committed the output without
         * registering it (past its registration cap, or registering failed), another attempt of the
         * map replaced it in the table, or its table has no entry for it (the output was migrated there
         * by decommissioning, or is lost): no bytes here, the caller fetches it through the engine's own path,
         * which serves it from the files or fails the fetch if they are gone.
         */
        public boolean unregistered() {
            return viaEngine != null;
        }

        /** Why {@link #unregistered()} blocks go through the engine's path, or null. */
        public String viaEngineReason() {
            return viaEngine;
        }

        /**
         * Time from posting the block's data READs to their last completion; for a {@link #streamed()}
         * block, the sum over the windows taken so far.
         */
        public long readNanos() {
            return stream != null ? stream.readNanos() : readNanos;
        }

        /**
         * Whether the block is larger than the pool's largest buffer: its bytes are not in one buffer
         * ({@link #bytes()} fails) but come through {@link #open} window by window.
         */
        public boolean streamed() {
            return stream != null;
        }

        /** For a {@link #streamed()} block: time its reads waited for windows to land so far; else 0. */
        public long streamWaitNanos() {
            return stream != null ? stream.waitNanos() : 0;
        }

        public Request request() {
            return request;
        }

        public long length() {
            return length;
        }

        /**
         * The bytes (a view: position 0, limit {@link #length()}); valid until {@link #close()}.
         *
         * @throws IllegalStateException for a {@link #streamed()} block
         */
        public ByteBuffer bytes() {
            if (stream != null) {
                throw new IllegalStateException("a streamed block of " + length + " bytes is read through open()");
            }
            return buffer == null ? ByteBuffer.allocate(0)
                    : buffer.byteBuffer().duplicate().clear().limit((int) length);
        }

        /**
         * Bytes {@code [from, to)} of the block as a stream, valid until {@link #close()}. A
         * {@link #streamed()} block is read front to back: each range opened starts at or after where
         * the previous one was left (bytes between are skipped), and its reads wait for the windows to
         * land; a failed window READ, or none landing in time, is thrown as a {@link StreamFailed}
         * carrying the {@link FetchFailure} (task thread only).
         */
        public InputStream open(long from, long to) {
            if (from < 0 || to < from || to > length) {
                throw new IndexOutOfBoundsException("[" + from + ", " + to + ") outside a block of " + length);
            }
            if (stream == null) {
                return new ByteBufferInputStream(bytes().position((int) from).limit((int) to).slice());
            }
            return stream.range(from, to);
        }

        /** Returns the buffer to the pool and the bytes to the in-flight budget (task thread). */
        @Override
        public void close() {
            if (released) {
                return;
            }
            released = true;
            if (stream != null) {
                stream.close();
                return;
            }
            owner.giveBack(buffer, charged);
        }
    }

    /** A streamed block's failure, thrown from its stream's reads (unchecked: it crosses decoders). */
    public static final class StreamFailed extends RuntimeException {
        private static final long serialVersionUID = 1L;
        private final transient FetchFailure failure;

        StreamFailed(FetchFailure failure) {
            super(failure.getMessage(), failure);
            this.failure = failure;
        }

        public FetchFailure failure() {
            return failure;
        }
    }

    private static final int DEFAULT_READS_IN_FLIGHT_PER_PEER =
            Integer.parseInt(RdmaShuffleConf.MAX_READS_IN_FLIGHT_PER_PEER.defaultValue());

    private final long timeoutMs;
    private final FetchBudget budget;
    private final FetchBuffers buffers;
    private final RequestStateMachine steps;
    private int outstanding;

    /** A fetcher with a metadata cache of its own and the default bound on READs per peer. */
    public BlockFetcher(RdmaNode node, BufferPool pool, long maxBytesInFlight, int readBlockBytes, long timeoutMs) {
        this(node, pool, new MetadataCache(), maxBytesInFlight, DEFAULT_READS_IN_FLIGHT_PER_PEER, readBlockBytes,
                timeoutMs);
    }

    /**
     * A fetcher sharing {@code metadataCache} (one per shuffle on an executor) with other fetchers.
     *
     * @param maxBytesInFlight bytes in READs and in blocks not yet closed
     * @param maxReadsInFlightPerPeer READs posted to one peer and not yet taken up by the task
     * @param readBlockBytes the longest single READ
     * @param timeoutMs how long {@link #next} waits without any READ landing
     */
    public BlockFetcher(RdmaNode node, BufferPool pool, MetadataCache metadataCache, long maxBytesInFlight,
                        int maxReadsInFlightPerPeer, int readBlockBytes, long timeoutMs) {
        if (maxBytesInFlight < 1 || maxReadsInFlightPerPeer < 1 || readBlockBytes < 1 || timeoutMs < 1) {
            throw new IllegalArgumentException("bounds must be positive: " + maxBytesInFlight + " bytes, "
                    + maxReadsInFlightPerPeer + " READs per peer, READs of " + readBlockBytes + " bytes, "
                    + timeoutMs + " ms");
        }
        this.timeoutMs = timeoutMs;
        this.budget = new FetchBudget(pool, maxBytesInFlight, maxReadsInFlightPerPeer, readBlockBytes);
        this.buffers = new FetchBuffers(pool, budget);
        this.steps = new RequestStateMachine(node, pool, metadataCache, budget, buffers, readBlockBytes, timeoutMs);
    }

    /**
     * Queues {@code r}; its block (or failure) comes out of {@link #next}. Posts what the budget allows
     * at once, never waiting for the pool.
     */
    public void add(Request r) {
        if (buffers.closed()) {
            throw new IllegalStateException("fetcher closed");
        }
        outstanding++;
        steps.add(r);
        steps.pump(false);
    }

    /**
     * Queues every request of {@code rs}, then posts what the budget allows in one go (as {@link #add} for each,
     * but READs of many requests leave together rather than one request at a time), never waiting for the pool.
     */
    public void addAll(java.util.Collection<Request> rs) {
        if (buffers.closed()) {
            throw new IllegalStateException("fetcher closed");
        }
        for (Request r : rs) {
            outstanding++;
            steps.add(r);
        }
        steps.pump(false);
    }

    /**
     * Whether READs have landed that {@link #progress} would take up: one volatile read, cheap enough
     * to ask per record; any thread.
     */
    public boolean hasLanded() {
        return buffers.hasLanded();
    }

    /** Blocks still to come out of {@link #next}. */
    public int outstanding() {
        return outstanding;
    }

    /**
     * Takes up READs that have landed and posts the follow-ups the budget allows, without waiting;
     * for the task thread between other work (e.g. while it reads local blocks).
     */
    public void progress() {
        if (buffers.closed()) {
            return;
        }
        FetchStep s;
        while ((s = buffers.pollLanded()) != null) {
            steps.takeUpLanded(s);
        }
        steps.pump(false);
    }

    /**
     * The next finished block. Waits while READs are in flight, each wait bounded by the request
     * timeout since the last READ landed, in running time (a pause of this JVM is added: {@link Pauses}).
     *
     * @throws FetchFailure naming the request when it failed, or naming the oldest request still
     *     outstanding when nothing landed in time
     * @throws BufferPoolException when this executor's pool gives no buffer in time (or the wait was
     *     interrupted: the interrupt flag stays set); no peer is to blame
     * @throws IllegalStateException when closed or when no block is outstanding
     */
    public Block next() throws FetchFailure, InterruptedException {
        if (buffers.closed()) {
            throw new IllegalStateException("fetcher closed");
        }
        if (outstanding == 0) {
            throw new IllegalStateException("no block outstanding");
        }
        long timeoutNanos = TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        long since = System.nanoTime(); // the last landing; the wait counts running time from it (Pauses)
        for (;;) {
            Object result = steps.ready().poll();
            FetchStep s;
            while (result == null && (s = buffers.pollLanded()) != null) {
                since = System.nanoTime();
                result = steps.takeUp(s);
            }
            if (result != null) {
                outstanding--;
                try {
                    steps.pump(false); // keep READs flowing while the caller decodes this block
                } catch (RuntimeException e) {
                    if (result instanceof Block b) {
                        b.close(); // the caller never sees it
                    }
                    throw e;
                }
                if (result instanceof FetchFailure f) {
                    throw f;
                }
                return (Block) result;
            }
            steps.pump(true);
            if (!steps.ready().isEmpty() || buffers.hasLanded()) {
                continue;
            }
            long now = System.nanoTime(); // before looking: a pause between them is counted out
            long left = since + timeoutNanos + Pauses.pausedSince(since) - now;
            if (left <= 0) {
                throw timedOut();
            }
            s = buffers.pollLanded(left);
            if (s != null) {
                since = System.nanoTime();
                result = steps.takeUp(s);
                if (result != null) {
                    steps.ready().addFirst(result);
                }
            }
        }
    }

    /** The request of the oldest READ still in flight, or of the first step still waiting; null if none. */
    public Request oldestOutstanding() {
        return steps.oldestOutstanding();
    }

    private FetchFailure timedOut() {
        Request r = oldestOutstanding();
        String which = r == null ? "" : "; oldest outstanding: map index " + r.mapIndex() + " at " + r.peer();
        return new FetchFailure(r, FetchFailure.Kind.TIMEOUT, "no block arrived within " + timeoutMs + " ms" + which,
                null, true);
    }

    /**
     * Metadata or offsets windows READ again because what landed did not make sense: bytes that may not
     * have been that window's ({@link PeerClaims}).
     */
    public long metadataReadsAgain() {
        return steps.metadataReadsAgain();
    }

    /**
     * Buffers this fetcher kept out of the pool because a post threw after the channel may have accepted some of
     * its READs: each comes back once they all land, never when some were not accepted.
     */
    public long buffersWithheld() {
        return buffers.withheld();
    }

    /** Bytes this fetcher READ from output tables and metadata regions (not block data). */
    public long controlBytesRead() {
        return steps.controlBytesRead();
    }

    /** Bytes of the pool taken by buffers of READs in flight and of blocks not yet closed. */
    public long bytesInFlight() {
        return budget.bytesInFlight();
    }

    /** READs posted and not yet taken up, to every peer. */
    public int readsInFlight() {
        return budget.readsInFlight();
    }

    /**
     * Stops posting and returns every buffer: those of blocks that arrived but were not taken with
     * {@link #next}, those of READs that landed now, those of the windows at hand of {@link Block#streamed()
     * streamed} blocks, and — through their completions — those of READs still in flight. Blocks in one buffer
     * handed out stay valid until closed; a streamed block ends with its fetcher (its windows are READ by it):
     * reading it further fails with an {@link IllegalStateException}, closing it is harmless. Idempotent.
     */
    @Override
    public void close() {
        if (buffers.closed()) {
            return;
        }
        steps.clear(); // steps waiting to be posted hold no buffer
        try {
            buffers.close(steps.ready());
        } finally {
            steps.fetcherClosed(); // streamed blocks handed out end with their fetcher
        }
    }
}
