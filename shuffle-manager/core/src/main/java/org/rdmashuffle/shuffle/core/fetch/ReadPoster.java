package org.rdmashuffle.shuffle.core.fetch;

import java.util.ArrayDeque;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/**
 * Builds and posts the READs of one phase of a step into the buffer it is given, and remembers the order
 * of posts, so a timeout can blame the oldest READ still in flight. Task thread only; one batch and one
 * piece consumer serve every post, so posting allocates nothing.
 *
 * <p>A post that fails returns the failure; the caller queues it as the request's result or fails the stream.
 * The buffer goes back at once when the channel says nothing was posted (a {@link TransportException}); after
 * any other exception some READs may have been accepted, so the buffer stays out of the pool until they land
 * ({@link FetchBuffers#withhold}).
 */
final class ReadPoster {
    private final RdmaNode node;
    private final FetchBuffers buffers;
    private final FetchBudget budget;
    private final int readBlockBytes;
    private final ReadBatch batch = new ReadBatch(8);
    /**
     * Steps in the order their READs were posted, one entry per post. An entry is stale when its step is
     * no longer in flight or was posted again since (for its next phase): then a later entry stands for
     * it. Stale entries are dropped when they reach the head.
     */
    private final ArrayDeque<FetchStep> postedOrder = new ArrayDeque<>();
    private final MapOutputLayout.PieceConsumer addPiece = this::addPiece;
    private FetchStep filling;
    private int fillAt;

    ReadPoster(RdmaNode node, FetchBuffers buffers, FetchBudget budget, int readBlockBytes) {
        this.node = node;
        this.buffers = buffers;
        this.budget = budget;
        this.readBlockBytes = readBlockBytes;
    }

    /**
     * Posts the READs of {@code s}'s phase into {@code b}.
     *
     * @return null when posted, else the request's failure (the buffer is back in the pool)
     */
    FetchFailure post(FetchStep s, RegisteredBuffer b) {
        BlockFetcher.Request r = s.request;
        buffers.attach(s, b);
        try {
            switch (s.phase) {
                case SLOT -> batch.add(r.table().address() + (long) r.mapIndex() * ShuffleOutputTable.SLOT_BYTES,
                        r.table().rkey(), ShuffleOutputTable.SLOT_BYTES, b, 0, 0);
                case METADATA -> {
                    RegionDescriptor md = s.metadataRegion;
                    if (r.startPartition() == 0) { // the offsets follow the descriptors: one piece
                        batch.add(md.address(), md.rkey(), s.bytes, b, 0, 0);
                    } else {
                        batch.add(md.address(), md.rkey(), s.headBytes, b, 0, 0);
                        batch.add(md.address() + s.headBytes + (long) r.startPartition() * 8, md.rkey(),
                                s.bytes - s.headBytes, b, s.headBytes, 0);
                    }
                }
                case OFFSETS -> {
                    RegionDescriptor md = s.metadata.where();
                    batch.add(md.address() + s.metadata.offsetPosition(r.startPartition()), md.rkey(), s.bytes, b, 0,
                            0);
                }
                case DATA -> fill(s, s.firstOffset, s.endOffset);
                default -> throw new IllegalStateException("nothing to post in phase " + s.phase);
            }
        } catch (RuntimeException e) {
            batch.clear();
            buffers.giveBack(s);
            return RequestStateMachine.failure(r, "cannot build the " + s.phase.name().toLowerCase() + " READs", e);
        }
        s.reads = batch.size();
        Exception e = send(s);
        return e == null ? null
                : RequestStateMachine.failure(r, "cannot post the " + s.phase.name().toLowerCase() + " READs", e);
    }

    /**
     * Posts one window of a streamed block: bytes {@code [at, at + size)} of the data file into {@code b}.
     *
     * @return null when posted, else the stream's failure (the buffer is back in the pool)
     */
    FetchFailure postWindow(FetchStep w, RegisteredBuffer b, long at, int size) {
        buffers.attach(w, b);
        w.windowAt = at;
        w.windowReady = false;
        try {
            fill(w, at, at + size);
        } catch (RuntimeException e) {
            batch.clear();
            buffers.giveBack(w);
            return RequestStateMachine.failure(w.request, "cannot build the data READs", e);
        }
        w.reads = batch.size();
        w.bytes = size;
        Exception e = send(w);
        return e == null ? null : RequestStateMachine.failure(w.request, "cannot post the data READs", e);
    }

    /** Adds the READs of data file bytes {@code [from, to)} of the step's map output, region by region. */
    private void fill(FetchStep s, long from, long to) {
        filling = s;
        fillAt = 0;
        try {
            MapOutputLayout.forEachPiece(from, to, s.metadata.maxRegionBytes(), readBlockBytes, addPiece);
        } finally {
            filling = null;
        }
    }

    private void addPiece(int region, int offset, int length) {
        RegionDescriptor d = filling.metadata.regions()[region];
        batch.add(d.address() + offset, d.rkey(), length, filling.buffer, fillAt, fillAt);
        fillAt += length;
    }

    /**
     * Posts the batch built for {@code s} and counts its READs.
     *
     * @return null when posted, else why not: then nothing was posted and the buffer is back in the pool
     */
    private Exception send(FetchStep s) {
        s.armFor(s.reads);
        s.inFlight = true;
        s.postedNanos = System.nanoTime();
        budget.readsPosted(s);
        postedOrder.add(s);
        s.postedEntries++;
        try {
            postTo(s);
            return null;
        } catch (TransportException e) {
            // The channel's contract: nothing was posted, no completion will come.
            s.inFlight = false;
            budget.readsDone(s);
            buffers.giveBack(s);
            return e;
        } catch (RuntimeException e) {
            // Anything else may come after the channel accepted some of the READs, which will land in the buffer:
            // it must not go back to the pool before they all complete (if some were never accepted, never).
            s.inFlight = false;
            budget.readsDone(s);
            buffers.withhold(s);
            return e;
        } finally {
            batch.clear();
        }
    }

    /**
     * Posts to the peer's channel. A channel that closed without serving anything outstanding ({@link
     * ReadStatus#IDLE_CLOSED}: it went unused for the transport's idle timeout while this task held it, or its
     * peer closed the connection in order to make room for a newcomer while it was silent) is replaced once by
     * a fresh one. READs that completed with that status are posted again by their step
     * ({@link RequestStateMachine#takeUp}, {@link BlockStream#landed}) and come here.
     */
    private void postTo(FetchStep s) throws TransportException {
        FetchPeer p = s.peer;
        try {
            p.channel.post(batch, s);
        } catch (TransportException e) {
            if (e.status() != ReadStatus.IDLE_CLOSED) {
                throw e;
            }
            p.channel = node.connect(s.request.peer());
            p.channel.post(batch, s);
        }
    }

    /** The request of the oldest post still in flight, or null. */
    BlockFetcher.Request oldestInFlight() {
        prune();
        FetchStep s = postedOrder.peek();
        return s == null ? null : s.request;
    }

    /** Drops stale entries at the head of the order of posts. */
    void prune() {
        FetchStep s;
        while ((s = postedOrder.peek()) != null && (!s.inFlight || s.postedEntries > 1)) {
            postedOrder.poll(); // a step's first entry is its oldest post: stale if it was posted again
            s.postedEntries--;
        }
    }

    /** Forgets every post (the fetcher closed). */
    void clear() {
        postedOrder.clear();
    }
}
