package org.rdmashuffle.shuffle.core.fetch;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * One request on its way through the {@link Phase phases} ({@link RequestStateMachine}), or one window
 * of a streamed block ({@link BlockStream}), and the listener of its READs. The task thread owns every
 * field but the completion state ({@code left}, {@link #status()}, {@link #landedNanos()}), which the
 * transport's thread writes, and {@link #buffer}, whose holder in each state {@link FetchBuffers} states.
 */
final class FetchStep implements ReadListener {
    /** What a request waits for next, and where it goes from there. */
    enum Phase {
        /** Not started: the metadata cache decides between {@link #SLOT} and {@link #OFFSETS}. */
        START,
        /**
         * The map index's slot in the peer's output table; then {@link #METADATA}, or {@link #SLOT} again
         * when what landed may have been torn by a rewrite of the slot.
         */
        SLOT,
        /**
         * The map output's metadata region: its header and region descriptors, and the offsets of the
         * request's partitions (two pieces of one READ step, one when the range starts at partition 0);
         * then {@link #DATA} (or a streamed block, or no READ for an empty one), or {@link #SLOT} again.
         */
        METADATA,
        /**
         * The offsets of the request's partitions, its metadata being cached; then {@link #DATA} (or a
         * streamed block, or none), or {@link #SLOT} again with the cached metadata dropped.
         */
        OFFSETS,
        /** The block's bytes: the last phase. */
        DATA,
        /** One window of a streamed block's bytes; the step is reused for a later window of the block. */
        WINDOW
    }

    private static final VarHandle LEFT;
    private static final VarHandle STATUS;

    static {
        try {
            MethodHandles.Lookup l = MethodHandles.lookup();
            LEFT = l.findVarHandle(FetchStep.class, "left", int.class);
            STATUS = l.findVarHandle(FetchStep.class, "status", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** Where the step goes when its last READ completes. */
    final FetchBuffers buffers;
    final BlockFetcher.Request request;
    final FetchPeer peer;
    Phase phase = Phase.START;
    /** READs and bytes the current phase posts (or posted). */
    int reads;
    int bytes;
    /** What the current phase's buffer takes from the pool (its capacity), charged to the byte budget. */
    int charged;
    /** The current phase's pooled buffer, or null: who holds and releases it is {@link FetchBuffers}'s rule. */
    RegisteredBuffer buffer;
    long mapId;
    /** Slot READs in a row whose metadata named another map attempt (torn by a rewrite). */
    int tornSlotReads;
    RegionDescriptor metadataRegion;
    /** The metadata's header and descriptors, in bytes (from the slot's region count). */
    int headBytes;
    ShuffleOutputTable.Metadata metadata;
    /** Where the request's partitions start and end in the data file. */
    long firstOffset;
    long endOffset;
    /** Offsets of every partition of the range, kept for the block when it has more than one. */
    long[] window;
    /** For a window of a streamed block: the stream, where the window starts, whether it is at hand. */
    BlockStream stream;
    long windowAt;
    boolean windowReady;
    long postedNanos;
    boolean inFlight;
    /**
     * Its READs came back {@link ReadStatus#IDLE_CLOSED} (the channel closed before serving them) and were posted
     * once more on a fresh channel; a second such answer fails as any other (a window: reset when one lands).
     */
    boolean postedAgainAfterClose;
    /** This step's entries in the order of posts ({@link ReadPoster}), one per post; all but the last are stale. */
    int postedEntries;
    /**
     * Its post threw after the channel may have accepted some of its READs: its result is out (a failure), and
     * its buffer stays with it until its last READ completes ({@link FetchBuffers#withhold}).
     */
    boolean abandoned;
    @SuppressWarnings("unused")
    private volatile int left;
    private volatile int status;
    private volatile long landedNanos;

    FetchStep(FetchBuffers buffers, BlockFetcher.Request request, FetchPeer peer) {
        this.buffers = buffers;
        this.request = request;
        this.peer = peer;
    }

    void armFor(int readCount) {
        status = ReadStatus.SUCCESS;
        left = readCount;
    }

    /** The first failed status among the phase's READs, or {@link ReadStatus#SUCCESS}. */
    int status() {
        return status;
    }

    /** When the phase's last READ completed. */
    long landedNanos() {
        return landedNanos;
    }

    /**
     * On a transport thread, or on the thread that fails or closes the channel or node (see
     * {@link ReadListener}); never inside the post that accepted the READ.
     */
    @Override
    public void onReadComplete(long requestId, int st, int lengthBytes) {
        if (st != ReadStatus.SUCCESS) {
            STATUS.compareAndSet(this, ReadStatus.SUCCESS, st);
        }
        if ((int) LEFT.getAndAdd(this, -1) == 1) {
            landedNanos = System.nanoTime();
            buffers.landed(this);
        }
    }
}
