package org.rdmashuffle.shuffle.core.fetch;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.shuffle.core.directory.MetadataCache;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Block;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Request;
import org.rdmashuffle.shuffle.core.fetch.FetchStep.Phase;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/**
 * The requests of one {@link BlockFetcher} on their way through the {@link Phase phases}: each waits in
 * its peer's line until the {@link FetchBudget} and the pool allow its next READ, which the
 * {@link ReadPoster} posts; what lands is taken up here — a slot or metadata parsed and checked
 * ({@link PeerClaims}), the next phase queued first in the peer's line, or the block made. Results
 * (blocks and failures) queue in {@link #ready} for {@link BlockFetcher#next}. Task thread only.
 */
final class RequestStateMachine {
    private static final MapOutputLayout.PieceConsumer COUNT_ONLY = (region, offset, length) -> { };
    /** Why a located block goes through the engine's path: its region's key is unknown at the peer now. */
    static final String REGION_GONE = "its region at the peer is deregistered (another attempt of the map replaced "
            + "it there, or it was withdrawn)";

    final FetchBuffers buffers;
    final FetchBudget budget;
    final ReadPoster poster;
    /** How long a wait for a READ to land may take. */
    final long timeoutMs;
    /** The pool's largest buffer: a block larger than this streams through windows of this size. */
    final int windowBytes;
    private final RdmaNode node;
    private final BufferPool pool;
    private final MetadataCache metadataCache;
    private final int readBlockBytes;
    private final Map<NodeAddress, FetchPeer> peers = new HashMap<>();
    private final List<FetchPeer> peerList = new ArrayList<>();
    /**
     * Results for {@link BlockFetcher#next}, in order: failures, empty blocks, and blocks whose data landed
     * (taken up by {@link BlockFetcher#progress} or behind a failure), which hold pool buffers until closed.
     */
    private final ArrayDeque<Object> ready = new ArrayDeque<>();
    /** Streams of blocks made and not closed yet: they end with the fetcher ({@link #fetcherClosed}). */
    private final List<BlockStream> streams = new ArrayList<>();
    /** The two ends' offsets of a one-partition request, parsed here to allocate nothing. */
    private final long[] ends = new long[2];
    private long controlBytesRead;
    private long metadataReadsAgain;

    RequestStateMachine(RdmaNode node, BufferPool pool, MetadataCache metadataCache, FetchBudget budget,
                        FetchBuffers buffers, int readBlockBytes, long timeoutMs) {
        this.node = node;
        this.pool = pool;
        this.metadataCache = metadataCache;
        this.budget = budget;
        this.buffers = buffers;
        this.poster = new ReadPoster(node, buffers, budget, readBlockBytes);
        this.readBlockBytes = readBlockBytes;
        this.windowBytes = pool.options().maxBufferBytes();
        this.timeoutMs = timeoutMs;
    }

    static FetchFailure failure(Request r, String what, Throwable cause) {
        return failure(r, FetchFailure.Kind.READ, what, cause);
    }

    static FetchFailure failure(Request r, FetchFailure.Kind kind, String what, Throwable cause) {
        return new FetchFailure(r, kind, what + " (map index " + r.mapIndex() + " at " + r.peer() + ")", cause, false);
    }

    /** Results for {@link BlockFetcher#next}: {@link Block}s and {@link FetchFailure}s. */
    ArrayDeque<Object> ready() {
        return ready;
    }

    /** Queues {@code r} in its peer's line, connecting to the peer the first time (a failure if it cannot). */
    void add(Request r) {
        FetchPeer p = peers.get(r.peer());
        if (p == null) {
            p = new FetchPeer();
            peers.put(r.peer(), p);
            peerList.add(p);
            try {
                p.channel = node.connect(r.peer()); // on the task's thread: completions never wait for a connect
            } catch (TransportException e) {
                p.connectFailure = e; // a dead peer costs one connect's timeouts and retries, not one per block
            }
        }
        if (p.connectFailure != null) {
            ready.add(failure(r, "cannot connect", p.connectFailure));
            return;
        }
        p.waiting.add(new FetchStep(buffers, r, p));
    }

    /** The request of the oldest READ still in flight, or of the first step still waiting; null if none. */
    Request oldestOutstanding() {
        Request r = poster.oldestInFlight();
        if (r != null) {
            return r;
        }
        for (FetchPeer p : peerList) {
            if (!p.waiting.isEmpty()) {
                return p.waiting.peek().request;
            }
        }
        return null;
    }

    /** Forgets every step waiting or in flight (the fetcher closes); a step waiting holds no buffer. */
    void clear() {
        for (FetchPeer p : peerList) {
            p.waiting.clear();
        }
        poster.clear();
    }

    /** The fetcher closed (after {@link FetchBuffers#close}): every stream not closed gives back its windows at hand. */
    void fetcherClosed() {
        for (int i = streams.size() - 1; i >= 0; i--) {
            streams.get(i).fetcherClosed();
        }
        streams.clear();
    }

    void streamClosed(BlockStream s) {
        streams.remove(s);
    }

    long controlBytesRead() {
        return controlBytesRead;
    }

    long metadataReadsAgain() {
        return metadataReadsAgain;
    }

    // ---- posting ----

    /**
     * Posts waiting steps while the budget allows. Buffers are taken without waiting; only when
     * nothing else can make progress (no READ in flight, nothing landed or ready) and {@code mayWait},
     * it waits for the pool, up to the pool's acquire timeout.
     *
     * @throws org.rdmashuffle.pool.BufferPoolException when the pool cannot give a buffer (the interrupt
     *     flag kept if that was the reason); the step stays first in its line
     */
    void pump(boolean mayWait) {
        for (int i = 0; i < peerList.size() && !buffers.closed(); i++) {
            FetchPeer p = peerList.get(i);
            FetchStep s;
            while ((s = p.waiting.peek()) != null) {
                if (s.phase == Phase.START && !start(s)) {
                    p.waiting.poll(); // finished without a READ (an empty block or a failure)
                    continue;
                }
                if (budget.readsWait(p, s.reads)) {
                    break; // this peer has enough in flight; try the next one
                }
                if (budget.bytesWait(s.bytes)) {
                    return; // the task's budget is spent: later steps wait their turn
                }
                // The pool's trouble (exhausted by other tasks, interrupted, a size above its cap) is this
                // executor's, not the peer's: it leaves as a BufferPoolException, never a FetchFailure, and
                // the step stays waiting.
                RegisteredBuffer b = buffers.tryAcquire(s.bytes);
                if (b == null) {
                    if (!mayWait || budget.readsInFlight() > 0 || buffers.hasLanded() || !ready.isEmpty()) {
                        return; // what is in flight or landed frees buffers or gives the caller work
                    }
                    b = buffers.acquire(s.bytes);
                }
                p.waiting.poll();
                FetchFailure f = poster.post(s, b);
                if (f != null) {
                    ready.add(f);
                }
            }
        }
    }

    /**
     * Decides a new step's first phase: data when the metadata is cached, else the slot.
     *
     * @return false when the step finished without a READ (its result is ready)
     */
    private boolean start(FetchStep s) {
        Request r = s.request;
        if (r.located() != null) { // the peer said where the bytes are: straight to the data
            ShuffleOutputTable.Metadata m = r.located().asMetadata(r.expected().numPartitions(), r.mapId());
            s.mapId = r.mapId();
            s.firstOffset = r.located().offset();
            s.endOffset = r.located().offset() + r.located().length();
            Object done = toData(s, m);
            if (done != null) {
                ready.add(done);
                return false;
            }
            return true;
        }
        ShuffleOutputTable.Metadata m = metadataCache.get(r.peer(), r.table().rkey(), r.mapIndex(), r.mapId());
        if (m != null) {
            String outside = PeerClaims.partitionRange(r, m);
            if (outside != null) {
                ready.add(failure(r, outside, null));
                return false;
            }
            s.phase = Phase.OFFSETS;
            s.metadata = m;
            s.mapId = m.mapId();
            s.reads = 1;
            s.bytes = offsetsBytes(r);
            return true;
        }
        s.phase = Phase.SLOT;
        s.reads = 1;
        s.bytes = ShuffleOutputTable.SLOT_BYTES;
        return true;
    }

    /**
     * Prepares the data phase.
     *
     * @return the step's result when it needs no READ (an empty block, a streamed block or a failure),
     *     else null
     */
    private Object toData(FetchStep s, ShuffleOutputTable.Metadata m) {
        Request r = s.request;
        long bytes = s.endOffset - s.firstOffset;
        String wrongSize = PeerClaims.blockSize(r, bytes);
        if (wrongSize != null) {
            return failure(r, FetchFailure.Kind.SIZE, wrongSize, null);
        }
        if (bytes == 0) {
            return new Block(buffers, r, null, 0, 0, null, null, null);
        }
        int pieces;
        try {
            pieces = MapOutputLayout.forEachPiece(s.firstOffset, s.endOffset, m.maxRegionBytes(), readBlockBytes,
                    COUNT_ONLY);
        } catch (RuntimeException ex) {
            return failure(r, "partition range outside the map output", ex);
        }
        if (bytes > windowBytes) {
            // larger than the pool's largest buffer (or than 2 GiB): handed out now, READ window by window
            // as it is read
            BlockStream stream = new BlockStream(this, r, s.peer, m, s.firstOffset, s.endOffset);
            streams.add(stream);
            return new Block(buffers, r, null, bytes, 0, null, s.window, stream);
        }
        s.phase = Phase.DATA;
        s.metadata = m;
        s.reads = pieces;
        s.bytes = (int) bytes;
        return null;
    }

    /** Bytes of the offsets of partitions {@code start..end} of {@code r}. */
    private static int offsetsBytes(Request r) {
        return (r.endPartition() - r.startPartition() + 1) * 8;
    }

    // ---- taking up what landed ----

    /** Takes up a landed step and queues its result, if it has one, for {@link BlockFetcher#next}. */
    void takeUpLanded(FetchStep s) {
        Object result = takeUp(s);
        if (result != null) {
            ready.add(result);
        }
    }

    /**
     * Takes up a landed step: parses a slot or metadata and queues the next phase first in its peer's
     * line, or makes the block.
     *
     * @return the step's result (a {@link Block} or a {@link FetchFailure}), or null when it goes on
     */
    Object takeUp(FetchStep s) {
        if (s.abandoned) {
            buffers.abandonedLanded(s); // its post failed part-way: its result is out already
            return null;
        }
        s.inFlight = false;
        budget.readsDone(s);
        poster.prune();
        int status = s.status();
        if (status == ReadStatus.IDLE_CLOSED && s.phase != Phase.WINDOW && !s.postedAgainAfterClose) {
            // The channel closed before serving these READs (its peer made room while the channel was silent, or it
            // went unused): nobody failed. Posted once more, where ReadPoster connects again.
            s.postedAgainAfterClose = true;
            buffers.giveBack(s);
            s.peer.waiting.addFirst(s);
            return null;
        }
        switch (s.phase) {
            case SLOT -> {
                try {
                    return slotLanded(s, status);
                } finally {
                    buffers.giveBack(s);
                }
            }
            case METADATA -> {
                return metadataLanded(s, status);
            }
            case OFFSETS -> {
                return offsetsLanded(s, status);
            }
            case DATA -> {
                if (status != ReadStatus.SUCCESS) {
                    buffers.giveBack(s);
                    if (status == ReadStatus.UNKNOWN_KEY && s.request.located() != null) {
                        // The region the peer named is deregistered: another attempt replaced the output there, or
                        // it was withdrawn. Its bytes are not READ as anyone's: the engine's path serves the map.
                        return new Block(buffers, s.request, null, 0, 0, REGION_GONE, null, null);
                    }
                    return failure(s.request, "data READ failed: " + ReadStatus.describe(status), null);
                }
                // the block holds the buffer now; its bytes stay in the budget until it is closed
                return new Block(buffers, s.request, buffers.handToBlock(s), s.bytes,
                        s.landedNanos() - s.postedNanos, null, s.window, null);
            }
            case WINDOW -> {
                s.stream.landed(s, status);
                return null;
            }
            default -> throw new IllegalStateException("a step landed in phase " + s.phase);
        }
    }

    /** A slot landed: a block for the engine's path, the metadata phase queued, the slot READ again, or a failure. */
    private Object slotLanded(FetchStep s, int status) {
        Request r = s.request;
        ShuffleOutputTable.Slot slot;
        try {
            if (status != ReadStatus.SUCCESS) {
                return failure(r, "output table READ failed: " + ReadStatus.describe(status), null);
            }
            controlBytesRead += s.bytes;
            slot = ShuffleOutputTable.Slot.parse(s.buffer.byteBuffer().duplicate().clear());
        } catch (RuntimeException e) {
            return failure(r, "corrupt output table", e);
        }
        String viaEngine = PeerClaims.viaEngine(r, slot);
        if (viaEngine != null) {
            return new Block(buffers, r, null, 0, 0, viaEngine, null, null);
        }
        RegionDescriptor md = slot.metadata();
        String wrongLength = PeerClaims.metadataLength(r, slot.regionCount(), md.length());
        if (wrongLength != null) {
            s.mapId = slot.mapId();
            return slotAgain(s, "corrupt output table: " + wrongLength); // or torn by a rewrite
        }
        long headBytes = ShuffleOutputTable.offsetPosition(slot.regionCount(), 0);
        String outside = PeerClaims.rangeOutsideSlot(r, slot.regionCount(), headBytes, md.length());
        if (outside != null) {
            return failure(r, outside, null);
        }
        String tooLarge = PeerClaims.beyondPool(slot.regionCount(), headBytes + offsetsBytes(r),
                pool.options().maxRegisteredBytes());
        if (tooLarge != null) {
            // no buffer this pool could ever give holds it: the peer's table is wrong, not this executor
            s.mapId = slot.mapId();
            return slotAgain(s, tooLarge);
        }
        s.phase = Phase.METADATA;
        s.mapId = slot.mapId();
        s.metadataRegion = md;
        s.headBytes = (int) headBytes;
        s.reads = r.startPartition() == 0 ? 1 : 2;
        s.bytes = s.headBytes + offsetsBytes(r);
        s.peer.waiting.addFirst(s);
        return null;
    }

    /** Metadata landed: cached and the data phase queued (or the block made), READ again, or a failure. */
    private Object metadataLanded(FetchStep s, int status) {
        Request r = s.request;
        ShuffleOutputTable.Metadata m;
        String wrongOffsets;
        try {
            if (status != ReadStatus.SUCCESS) {
                // the slot may have been torn by a rewrite and named a withdrawn region: look again
                return slotAgain(s, "metadata READ failed: " + ReadStatus.describe(status));
            }
            controlBytesRead += s.bytes;
            ByteBuffer landed = s.buffer.byteBuffer().duplicate().clear().limit(s.bytes);
            String torn = PeerClaims.tornSlot(s.mapId, landed.getLong(16));
            if (torn != null) {
                return slotAgain(s, torn); // the slot READ overlapped its rewrite (a map attempt republished)
            }
            try {
                m = ShuffleOutputTable.Metadata.parse(landed.duplicate().limit(s.headBytes), s.metadataRegion);
            } catch (RuntimeException e) {
                return metadataAgain(s, null, "corrupt map output metadata: " + e.getMessage());
            }
            String wrongHeader = PeerClaims.header(r, m, s.headBytes);
            if (wrongHeader != null) {
                return metadataAgain(s, null, wrongHeader);
            }
            String outside = PeerClaims.partitionRange(r, m);
            if (outside != null) {
                return failure(r, outside, null);
            }
            wrongOffsets = PeerClaims.readOffsets(s, landed.position(s.headBytes), m, ends);
        } catch (RuntimeException e) {
            return failure(r, "corrupt map output metadata", e);
        } finally {
            buffers.giveBack(s);
        }
        if (wrongOffsets != null) {
            return metadataAgain(s, null, wrongOffsets);
        }
        metadataCache.put(r.peer(), r.table().rkey(), r.mapIndex(), s.mapId, m);
        return dataOrResult(s, m);
    }

    /** Offsets landed (the metadata cached): the data phase queued (or the block made), READ again, or a failure. */
    private Object offsetsLanded(FetchStep s, int status) {
        String wrongOffsets;
        try {
            if (status != ReadStatus.SUCCESS) {
                // the cached metadata's region is gone: the output was withdrawn or replaced
                return failure(s.request, "offsets READ failed: " + ReadStatus.describe(status), null);
            }
            controlBytesRead += s.bytes;
            wrongOffsets = PeerClaims.readOffsets(s, s.buffer.byteBuffer().duplicate().clear().limit(s.bytes),
                    s.metadata, ends);
        } finally {
            buffers.giveBack(s);
        }
        if (wrongOffsets != null) {
            return metadataAgain(s, s.metadata, wrongOffsets);
        }
        return dataOrResult(s, s.metadata);
    }

    /** Queues the data phase first in the peer's line, or returns the result that needs no data READ. */
    private Object dataOrResult(FetchStep s, ShuffleOutputTable.Metadata m) {
        Object done = toData(s, m);
        if (done != null) {
            return done;
        }
        s.peer.waiting.addFirst(s);
        return null;
    }

    /**
     * Queues {@code s} to READ its slot again — what it saw may have been torn by a rewrite of the slot
     * (a READ of it is not atomic) — or, after {@link PeerClaims#MAX_TORN_SLOT_READS} such READs in a row,
     * fails it.
     *
     * @return null when queued, else the failure
     */
    private Object slotAgain(FetchStep s, String why) {
        if (++s.tornSlotReads > PeerClaims.MAX_TORN_SLOT_READS) {
            return failure(s.request, why + " (" + s.tornSlotReads + " times in a row)", null);
        }
        s.phase = Phase.SLOT;
        s.reads = 1;
        s.bytes = ShuffleOutputTable.SLOT_BYTES;
        s.peer.waiting.addFirst(s);
        return null;
    }

    /**
     * A metadata or offsets window whose bytes do not make sense — offsets not rising within the data,
     * a header that contradicts the slot — may be bytes that were not that window's (a READ whose bytes
     * had not all landed, or torn by a republish): READs the slot and the metadata again, as a torn slot
     * is, up to {@link PeerClaims#MAX_TORN_SLOT_READS} times in a row, before the request fails. Counted
     * in {@link #metadataReadsAgain()}.
     *
     * @param cached the cached metadata the window was READ with (dropped from the cache), or null
     * @return null when queued, else the failure
     */
    private Object metadataAgain(FetchStep s, ShuffleOutputTable.Metadata cached, String why) {
        Request r = s.request;
        if (cached != null) {
            metadataCache.forget(r.peer(), r.table().rkey(), r.mapIndex(), cached);
            s.metadata = null;
        }
        metadataReadsAgain++;
        return slotAgain(s, why);
    }
}
