package org.rdmashuffle.shuffle.core;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/**
 * Fetches ranges of partitions of remote map outputs with one-sided READs only: the map index's
 * slot in the serving executor's {@link ShuffleOutputTable}, then the output's metadata header and
 * region descriptors with only the offsets of the range (the header and descriptors cached in a
 * {@link MetadataCache}, one per shuffle on an executor; a cached request READs its offsets alone),
 * then the bytes, into pooled registered buffers. Finished blocks come out of {@link #next} in
 * completion order, so consuming one overlaps fetching the others.
 *
 * <p><b>Budget.</b> Every READ counts, slot and metadata READs as well as data READs: at most
 * {@code maxReadsInFlightPerPeer} READs to one peer are posted and not yet taken up by the task, and
 * the pool buffers of READs in flight and of blocks not yet closed take at most {@code maxBytesInFlight}
 * bytes of the pool — a buffer is charged what it takes (its size class), not what its READs need, so a
 * 32-byte slot READ costs the smallest buffer (a step larger than either bound goes alone). Requests beyond the budget wait in this fetcher, not in the channel, so
 * a task with ten thousand blocks from one peer holds a bounded number of buffers and READs.
 *
 * <p><b>Large blocks.</b> A block larger than the pool's largest buffer (also one of more than 2 GiB)
 * is handed out as soon as its offsets are known, {@link Block#streamed() streamed}: its bytes are READ
 * a window of the largest buffer size at a time into at most {@link #STREAM_WINDOWS} pooled buffers as
 * {@link Block#open} is read, each buffer going back as soon as it is read (the windows count in the
 * byte budget; one window always goes, so a stream never waits on other blocks' budget).
 *
 * <p><b>Threads.</b> One fetcher serves one reduce task: {@link #add}, {@link #next},
 * {@link #progress} and {@link #close} run on the task's thread (not thread-safe), and that thread
 * does all the work: it acquires buffers, posts READs, parses slots and metadata and posts each
 * request's next READ (slot, then metadata, then data). A completion callback, on the transport's
 * thread, only counts down its step's READs and queues the finished step for the task thread — or,
 * once the fetcher is closed, returns the step's buffer to the pool itself. So no transport thread
 * ever waits for the pool or for room in a channel, and a closed fetcher gives back every buffer,
 * also those of READs that land after {@link #close}.
 *
 * <p><b>Failures.</b> What goes wrong with a peer (a missing output, a failed READ, metadata or sizes
 * that do not fit what the driver knows) comes out of {@link #next} as a {@link FetchFailure} naming
 * the request. What goes wrong on this executor — the pool exhausted by other tasks, an interrupted
 * wait for it — leaves {@link #add}, {@link #progress} or {@link #next} as a
 * {@link BufferPoolException}, which blames no peer.
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
                          int endPartition, Expected expected) {
        /** Accept whichever attempt the serving executor published. */
        public static final long ANY_MAP_ID = -1;

        /** A request with nothing known beforehand ({@link Expected#UNKNOWN}). */
        public Request(NodeAddress peer, RegionDescriptor table, int mapIndex, long mapId, int startPartition,
                       int endPartition) {
            this(peer, table, mapIndex, mapId, startPartition, endPartition, Expected.UNKNOWN);
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

    /** Why a block goes through Spark's path: its peer committed it without registering it. */
    static final String LEFT_UNREGISTERED = "it left map outputs unregistered (see its log)";
    /** Why a block goes through Spark's path: its peer's output table has no entry for the map. */
    public static final String NOT_IN_TABLE = "map outputs Spark locates there are not in its output table (migrated "
            + "there from a decommissioned executor)";

    /**
     * A fetched block — the bytes of the request's partitions, which lie one after the other in the map
     * output: partition {@code p}'s are {@link #bytes()} from {@link #offsetOf offsetOf(p)} to
     * {@code offsetOf(p + 1)}.
     */
    public final class Block implements AutoCloseable {
        private final Request request;
        private final RegisteredBuffer buffer;
        private final long length;
        /** What the block's buffer takes from the pool and so from the byte budget (its capacity). */
        private final long charged;
        private final long readNanos;
        /** For a block larger than the pool's largest buffer: the windows it streams through, else null. */
        private final Stream stream;
        private final String viaSpark;
        /**
         * The map output's offsets of partitions {@code startPartition..endPartition} (absolute), or null
         * when the block's partitions between its ends are not needed (one partition, or no bytes).
         */
        private final long[] window;
        private boolean released;

        Block(Request request, RegisteredBuffer buffer, int length, long readNanos, long[] window) {
            this(request, buffer, length, readNanos, null, window, null);
        }

        private Block(Request request, RegisteredBuffer buffer, long length, long readNanos, String viaSpark,
                      long[] window) {
            this(request, buffer, length, readNanos, viaSpark, window, null);
        }

        private Block(Request request, RegisteredBuffer buffer, long length, long readNanos, String viaSpark,
                      long[] window, Stream stream) {
            this.request = request;
            this.buffer = buffer;
            this.length = length;
            this.charged = buffer == null ? 0 : buffer.capacity();
            this.readNanos = readNanos;
            this.viaSpark = viaSpark;
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
         * by decommissioning, or is lost): no bytes here, the caller fetches it through Spark's own path,
         * which serves it from the files or fails the fetch if they are gone.
         */
        public boolean unregistered() {
            return viaSpark != null;
        }

        /** Why {@link #unregistered()} blocks go through Spark's path, or null. */
        public String viaSparkReason() {
            return viaSpark;
        }

        /**
         * Time from posting the block's data READs to their last completion; for a {@link #streamed()}
         * block, the sum over the windows taken so far.
         */
        public long readNanos() {
            return stream != null ? stream.readNanos : readNanos;
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
            return stream != null ? stream.waitNanos : 0;
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
        public java.io.InputStream open(long from, long to) {
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
            if (buffer != null) {
                buffer.release();
            }
            if (!closed) {
                bytesInFlight -= charged;
            }
        }
    }

    /** What a request waits for next. */
    private enum Phase {
        /** Not started: the metadata cache decides between {@link #SLOT} and {@link #OFFSETS}. */
        START,
        /** The map index's slot in the peer's output table. */
        SLOT,
        /**
         * The map output's metadata region: its header and region descriptors, and the offsets of the
         * request's partitions (two pieces of one READ step, one when the range starts at partition 0).
         */
        METADATA,
        /** The offsets of the request's partitions, its metadata being cached. */
        OFFSETS,
        /** The block's bytes. */
        DATA,
        /** One window of a streamed block's bytes. */
        WINDOW
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

    /** Window buffers (of the pool's largest size) one streamed block holds at most: posted, landed or read. */
    static final int STREAM_WINDOWS = 3;

    /**
     * The windows of a block larger than the pool's largest buffer: bytes {@code [first, end)} of the
     * data file, READ {@link #windowBytes} at a time into at most {@link #STREAM_WINDOWS} pooled buffers,
     * read in order; each buffer goes back to the pool as soon as it is read, and the next window's READ
     * is posted then. Task thread only, but for the windows' completions (through {@code landedSteps}).
     * Nothing is allocated per window: the window steps are made once per stream and reused.
     */
    private final class Stream {
        final Request request;
        final Peer peer;
        final ShuffleOutputTable.Metadata metadata;
        final long first;
        final long end;
        final Step[] windows = new Step[STREAM_WINDOWS];
        /** Windows posted, and windows read and given back (window k is in {@code windows[k % N]}). */
        long posted;
        long taken;
        /** Where the next window starts in the data file. */
        long postAt;
        /** Bytes of the block read so far; where the current window's unread bytes begin in it. */
        long position;
        boolean reading;
        int readAt;
        int readLimit;
        long readNanos;
        long waitNanos;
        FetchFailure failed;
        boolean streamClosed;

        Stream(Request request, Peer peer, ShuffleOutputTable.Metadata metadata, long first, long end) {
            this.request = request;
            this.peer = peer;
            this.metadata = metadata;
            this.first = first;
            this.end = end;
            this.postAt = first;
        }

        java.io.InputStream range(long from, long to) {
            if (streamClosed) {
                throw new IllegalStateException("block closed");
            }
            if (from < position) {
                throw new IllegalStateException("a streamed block is read front to back: byte " + from
                        + " is behind byte " + position);
            }
            return new Range(from, to);
        }

        /** A range of the block: skips to its start on first read. */
        private final class Range extends java.io.InputStream {
            private final long from;
            private final long to;

            Range(long from, long to) {
                this.from = from;
                this.to = to;
            }

            private boolean seek() {
                while (position < from) {
                    if (!advance()) {
                        return false;
                    }
                    int n = (int) Math.min(readLimit - readAt, from - position);
                    readAt += n;
                    position += n;
                }
                return position < to;
            }

            @Override
            public int read() {
                if (!seek() || !advance()) {
                    return -1;
                }
                int v = windows[(int) (taken % STREAM_WINDOWS)].buffer.byteBuffer().get(readAt) & 0xFF;
                readAt++;
                position++;
                return v;
            }

            @Override
            public int read(byte[] b, int off, int len) {
                java.util.Objects.checkFromIndexSize(off, len, b.length);
                if (len == 0) {
                    return 0;
                }
                if (!seek() || !advance()) {
                    return -1;
                }
                int n = (int) Math.min(Math.min(len, readLimit - readAt), to - position);
                windows[(int) (taken % STREAM_WINDOWS)].buffer.byteBuffer().get(readAt, b, off, n);
                readAt += n;
                position += n;
                return n;
            }

            @Override
            public long skip(long n) {
                if (n <= 0 || !seek()) {
                    return 0;
                }
                long target = Math.min(to, position + n);
                long start = position;
                while (position < target && advance()) {
                    int k = (int) Math.min(readLimit - readAt, target - position);
                    readAt += k;
                    position += k;
                }
                return position - start;
            }

            @Override
            public int available() {
                return position < from || !reading ? 0 : (int) Math.min(readLimit - readAt, to - position);
            }
        }

        /**
         * Makes sure unread bytes of the current window are at hand: gives back a window read to its
         * end, posts the next ones and waits for the one to read.
         *
         * @return false at the block's end
         */
        boolean advance() {
            if (failed != null) {
                throw new StreamFailed(failed);
            }
            if (streamClosed || closed) {
                throw new IllegalStateException("block closed");
            }
            if (reading && readAt < readLimit) {
                return true;
            }
            if (reading) {
                Step w = windows[(int) (taken % STREAM_WINDOWS)];
                giveBack(w);
                reading = false;
                taken++;
            }
            if (position == end - first) {
                return false;
            }
            fill();
            Step w = windows[(int) (taken % STREAM_WINDOWS)];
            long timeoutNanos = TimeUnit.MILLISECONDS.toNanos(timeoutMs);
            long waitFrom = System.nanoTime();
            long deadline = waitFrom + timeoutNanos;
            while (!w.windowReady && failed == null) {
                long left = deadline - System.nanoTime();
                Step l;
                try {
                    l = left <= 0 ? null : landedSteps.poll(left, TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IllegalStateException("interrupted while fetching a shuffle block", e);
                }
                if (l == null) {
                    fail(failure(request, "no block arrived within " + timeoutMs + " ms (the window at byte "
                            + position + " of a streamed block of " + (end - first) + " bytes)", null));
                    break;
                }
                deadline = System.nanoTime() + timeoutNanos;
                Object result = takeUp(l);
                if (result != null) {
                    ready.add(result);
                }
            }
            waitNanos += System.nanoTime() - waitFrom;
            if (failed != null) {
                throw new StreamFailed(failed);
            }
            reading = true;
            readAt = 0;
            readLimit = w.bytes;
            fill(); // the window just taken may have made room for the next ones
            return true;
        }

        /** Posts the next windows while this stream holds fewer than {@link #STREAM_WINDOWS} and budgets allow. */
        private void fill() {
            while (posted - taken < STREAM_WINDOWS && postAt < end) {
                int size = (int) Math.min(windowBytes, end - postAt);
                boolean alone = posted == taken; // the stream holds nothing: it goes on whatever the budgets
                if (!alone && (bytesInFlight + pool.bytesTaken(size) > maxBytesInFlight
                        || peer.readsInFlight + (size + readBlockBytes - 1) / readBlockBytes
                                > maxReadsInFlightPerPeer)) {
                    return;
                }
                RegisteredBuffer b = alone ? pool.acquire(size) : pool.tryAcquire(size);
                if (b == null) {
                    return;
                }
                int slot = (int) (posted % STREAM_WINDOWS);
                Step w = windows[slot];
                if (w == null) {
                    w = new Step(BlockFetcher.this, request, peer);
                    w.phase = Phase.WINDOW;
                    w.stream = this;
                    w.metadata = metadata;
                    windows[slot] = w;
                }
                postWindow(w, b, postAt, size);
                if (failed != null) {
                    throw new StreamFailed(failed);
                }
                postAt += size;
                posted++;
            }
        }

        /** A landed window taken up on the task thread. */
        void landed(Step w, int status) {
            if (streamClosed || failed != null || closed) {
                giveBack(w);
                return;
            }
            if (status != ReadStatus.SUCCESS) {
                giveBack(w);
                fail(failure(request, "data READ failed at byte " + (w.windowAt - first) + " of a streamed block of "
                        + (end - first) + " bytes: " + ReadStatus.describe(status), null));
                return;
            }
            readNanos += w.landedNanos - w.postedNanos;
            w.windowReady = true;
        }

        private void giveBack(Step w) {
            w.windowReady = false;
            if (w.buffer != null) {
                w.releaseBuffer();
                if (!closed) {
                    bytesInFlight -= w.charged;
                }
            }
        }

        /** Gives back every window at hand; those in flight come back as they land. */
        private void releaseHeld() {
            for (Step w : windows) {
                if (w != null && !w.inFlight) {
                    giveBack(w);
                }
            }
            reading = false;
        }

        void fail(FetchFailure f) {
            if (failed == null) {
                failed = f;
            }
            releaseHeld();
        }

        void close() {
            streamClosed = true;
            releaseHeld();
        }
    }

    /**
     * One peer: its channel, connected once per fetcher (or why that failed, which then fails every
     * request to it), the READs posted to it and the steps waiting for room; task thread only.
     */
    private static final class Peer {
        final ArrayDeque<Step> waiting = new ArrayDeque<>();
        RdmaChannel channel;
        TransportException connectFailure;
        int readsInFlight;
    }

    /**
     * One request on its way through the phases, and the listener of its READs. The task thread owns
     * every field but the completion state ({@code left}, {@code status}, {@code landedNanos}), which
     * the transport's thread writes, and {@code buffer}, which a completion landing after close
     * releases.
     */
    /** Torn slot READs tolerated in a row before the request fails. */
    static final int MAX_TORN_SLOT_READS = 3;

    private static final class Step implements ReadListener {
        private static final VarHandle LEFT;
        private static final VarHandle STATUS;

        static {
            try {
                MethodHandles.Lookup l = MethodHandles.lookup();
                LEFT = l.findVarHandle(Step.class, "left", int.class);
                STATUS = l.findVarHandle(Step.class, "status", int.class);
            } catch (ReflectiveOperationException e) {
                throw new ExceptionInInitializerError(e);
            }
        }

        final BlockFetcher fetcher;
        final Request request;
        final Peer peer;
        Phase phase = Phase.START;
        /** READs and bytes the current phase posts (or posted). */
        int reads;
        int bytes;
        /** What the current phase's buffer takes from the pool (its capacity), charged to the byte budget. */
        int charged;
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
        Stream stream;
        long windowAt;
        boolean windowReady;
        long postedNanos;
        boolean inFlight;
        /** This step's entries in {@code postedOrder}, one per post; all but the last are stale. */
        int postedEntries;
        @SuppressWarnings("unused")
        private volatile int left;
        private volatile int status;
        private volatile long landedNanos;

        Step(BlockFetcher fetcher, Request request, Peer peer) {
            this.fetcher = fetcher;
            this.request = request;
            this.peer = peer;
        }

        void armFor(int readCount) {
            status = ReadStatus.SUCCESS;
            left = readCount;
        }

        /** On the transport's thread (or the poster's, for READs a failing channel never accepted). */
        @Override
        public void onReadComplete(long requestId, int st, int lengthBytes) {
            if (st != ReadStatus.SUCCESS) {
                STATUS.compareAndSet(this, ReadStatus.SUCCESS, st);
            }
            if ((int) LEFT.getAndAdd(this, -1) == 1) {
                landedNanos = System.nanoTime();
                fetcher.landed(this);
            }
        }

        /** Returns the buffer, once; by the task thread, or by whoever drains a closed fetcher's steps. */
        void releaseBuffer() {
            RegisteredBuffer b = buffer;
            if (b != null) {
                buffer = null;
                b.release();
            }
        }
    }

    private static final int DEFAULT_READS_IN_FLIGHT_PER_PEER =
            Integer.parseInt(RdmaShuffleConf.MAX_READS_IN_FLIGHT_PER_PEER.defaultValue());
    private static final MapOutputLayout.PieceConsumer COUNT_ONLY = (region, offset, length) -> { };

    private final RdmaNode node;
    private final BufferPool pool;
    private final long maxBytesInFlight;
    private final int maxReadsInFlightPerPeer;
    private final int readBlockBytes;
    /** The pool's largest buffer: a block larger than this streams through windows of this size. */
    private final int windowBytes;
    private final long timeoutMs;
    private final MetadataCache metadataCache;
    /** Steps whose READs all completed, for the task thread; drained by close. */
    private final LinkedBlockingQueue<Step> landedSteps = new LinkedBlockingQueue<>();
    private volatile boolean closed;

    // Task thread only.
    private final Map<NodeAddress, Peer> peers = new HashMap<>();
    private final List<Peer> peerList = new ArrayList<>();
    /**
     * Results for {@link #next}, in order: failures, empty blocks, and blocks whose data landed (taken
     * up by {@link #progress} or behind a failure), which hold pool buffers until closed.
     */
    private final ArrayDeque<Object> ready = new ArrayDeque<>();
    /**
     * Steps in the order their READs were posted, one entry per post. An entry is stale when its step is
     * no longer in flight or was posted again since (for its next phase): then a later entry stands for
     * it. Stale entries are dropped when they reach the head.
     */
    private final ArrayDeque<Step> postedOrder = new ArrayDeque<>();
    private final ReadBatch batch = new ReadBatch(8);
    private Step filling;
    private int fillAt;
    private final MapOutputLayout.PieceConsumer addPiece = this::addPiece;
    /** The two ends' offsets of a one-partition request, parsed here (task thread) to allocate nothing. */
    private final long[] ends = new long[2];
    private long bytesInFlight;
    private int readsInFlight;
    private int outstanding;
    private long controlBytesRead;
    private long metadataReadsAgain;

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
        this.metadataCache = metadataCache;
        this.node = node;
        this.pool = pool;
        this.maxBytesInFlight = maxBytesInFlight;
        this.maxReadsInFlightPerPeer = maxReadsInFlightPerPeer;
        this.readBlockBytes = readBlockBytes;
        this.windowBytes = pool.options().maxBufferBytes();
        this.timeoutMs = timeoutMs;
    }

    /**
     * Queues {@code r}; its block (or failure) comes out of {@link #next}. Posts what the budget allows
     * at once, never waiting for the pool.
     */
    public void add(Request r) {
        if (closed) {
            throw new IllegalStateException("fetcher closed");
        }
        outstanding++;
        Peer p = peers.get(r.peer());
        if (p == null) {
            p = new Peer();
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
        p.waiting.add(new Step(this, r, p));
        pump(false);
    }

    /**
     * Whether READs have landed that {@link #progress} would take up: one volatile read, cheap enough
     * to ask per record; any thread.
     */
    public boolean hasLanded() {
        return !landedSteps.isEmpty();
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
        if (closed) {
            return;
        }
        Step s;
        while ((s = landedSteps.poll()) != null) {
            Object result = takeUp(s);
            if (result != null) {
                ready.add(result);
            }
        }
        pump(false);
    }

    /**
     * The next finished block. Waits while READs are in flight, each wait bounded by the request
     * timeout since the last READ landed.
     *
     * @throws FetchFailure naming the request when it failed, or naming the oldest request still
     *     outstanding when nothing landed in time
     * @throws BufferPoolException when this executor's pool gives no buffer in time (or the wait was
     *     interrupted: the interrupt flag stays set); no peer is to blame
     * @throws IllegalStateException when closed or when no block is outstanding
     */
    public Block next() throws FetchFailure, InterruptedException {
        if (closed) {
            throw new IllegalStateException("fetcher closed");
        }
        if (outstanding == 0) {
            throw new IllegalStateException("no block outstanding");
        }
        long timeoutNanos = TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        long deadline = System.nanoTime() + timeoutNanos;
        for (;;) {
            Object result = ready.poll();
            Step s;
            while (result == null && (s = landedSteps.poll()) != null) {
                deadline = System.nanoTime() + timeoutNanos;
                result = takeUp(s);
            }
            if (result != null) {
                outstanding--;
                try {
                    pump(false); // keep READs flowing while the caller decodes this block
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
            pump(true);
            if (!ready.isEmpty() || !landedSteps.isEmpty()) {
                continue;
            }
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                throw timedOut();
            }
            s = landedSteps.poll(left, TimeUnit.NANOSECONDS);
            if (s != null) {
                deadline = System.nanoTime() + timeoutNanos;
                result = takeUp(s);
                if (result != null) {
                    ready.addFirst(result);
                }
            }
        }
    }

    /** The request of the oldest READ still in flight, or of the first step still waiting; null if none. */
    public Request oldestOutstanding() {
        prunePosted();
        Step s = postedOrder.peek();
        if (s != null) {
            return s.request;
        }
        for (Peer p : peerList) {
            if (!p.waiting.isEmpty()) {
                return p.waiting.peek().request;
            }
        }
        return null;
    }

    private FetchFailure timedOut() {
        Request r = oldestOutstanding();
        String which = r == null ? "" : "; oldest outstanding: map index " + r.mapIndex() + " at " + r.peer();
        return new FetchFailure(r, "no block arrived within " + timeoutMs + " ms" + which, null, true);
    }

    private void prunePosted() {
        Step s;
        while ((s = postedOrder.peek()) != null && (!s.inFlight || s.postedEntries > 1)) {
            postedOrder.poll(); // a step's first entry is its oldest post: stale if it was posted again
            s.postedEntries--;
        }
    }

    private static FetchFailure failure(Request r, String what, Throwable cause) {
        return new FetchFailure(r, what + " (map index " + r.mapIndex() + " at " + r.peer() + ")", cause);
    }

    // ---- posting, on the task thread ----

    /**
     * Posts waiting steps while the budget allows. Buffers are taken without waiting; only when
     * nothing else can make progress (no READ in flight, nothing landed or ready) and {@code mayWait},
     * it waits for the pool, up to the pool's acquire timeout.
     *
     * @throws BufferPoolException when the pool cannot give a buffer (the interrupt flag kept if that
     *     was the reason); the step stays first in its line
     */
    private void pump(boolean mayWait) {
        for (int i = 0; i < peerList.size() && !closed; i++) {
            Peer p = peerList.get(i);
            Step s;
            while ((s = p.waiting.peek()) != null) {
                if (s.phase == Phase.START && !start(s)) {
                    p.waiting.poll(); // finished without a READ (an empty block or a failure)
                    continue;
                }
                if (p.readsInFlight > 0 && p.readsInFlight + s.reads > maxReadsInFlightPerPeer) {
                    break; // this peer has enough in flight; try the next one
                }
                if (bytesInFlight > 0 && bytesInFlight + pool.bytesTaken(s.bytes) > maxBytesInFlight) {
                    return; // the task's budget is spent: later steps wait their turn
                }
                // The pool's trouble (exhausted by other tasks, interrupted, a size above its cap) is this
                // executor's, not the peer's: it leaves as a BufferPoolException, never a FetchFailure, and
                // the step stays waiting.
                RegisteredBuffer b = pool.tryAcquire(s.bytes);
                if (b == null) {
                    if (!mayWait || readsInFlight > 0 || !landedSteps.isEmpty() || !ready.isEmpty()) {
                        return; // what is in flight or landed frees buffers or gives the caller work
                    }
                    b = pool.acquire(s.bytes);
                }
                p.waiting.poll();
                post(s, b);
            }
        }
    }

    /**
     * Decides a new step's first phase: data when the metadata is cached, else the slot.
     *
     * @return false when the step finished without a READ (its result is ready)
     */
    private boolean start(Step s) {
        Request r = s.request;
        ShuffleOutputTable.Metadata m = metadataCache.get(r.peer(), r.table().rkey(), r.mapIndex(), r.mapId());
        if (m != null) {
            if (r.startPartition() < 0 || r.endPartition() > m.numPartitions()
                    || r.startPartition() > r.endPartition()) {
                ready.add(failure(r, "partition range outside the map output's " + m.numPartitions(), null));
                return false;
            }
            s.phase = Phase.OFFSETS;
            s.metadata = m;
            s.mapId = m.mapId();
            s.reads = 1;
            s.bytes = windowBytes(r);
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
     * @return the step's result when it needs no READ (an empty block or a failure), else null
     */
    private Object toData(Step s, ShuffleOutputTable.Metadata m) {
        Request r = s.request;
        long bytes = s.endOffset - s.firstOffset;
        Expected e = r.expected();
        if (bytes < e.minBytes() || bytes > e.maxBytes()) {
            return failure(r, "map output at peer does not match MapOutputTracker: partitions [" + r.startPartition()
                    + ", " + r.endPartition() + ") hold " + bytes + " bytes there, the tracker's size allows "
                    + e.minBytes() + " to " + e.maxBytes(), null);
        }
        if (bytes == 0) {
            return new Block(r, null, 0, 0, null, null);
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
            return new Block(r, null, bytes, 0, null, s.window,
                    new Stream(r, s.peer, m, s.firstOffset, s.endOffset));
        }
        s.phase = Phase.DATA;
        s.metadata = m;
        s.reads = pieces;
        s.bytes = (int) bytes;
        return null;
    }

    /**
     * Checks a slot's metadata length before a buffer is taken for it: with the shuffle's partition
     * count known, the metadata is exactly a header, the slot's regions and one offset per partition
     * boundary ({@link ShuffleOutputTable}); else it must fit one buffer.
     *
     * @return what is wrong, or null
     */
    private static String checkMetadataLength(Request r, int regionCount, long lengthBytes) {
        int partitions = r.expected().numPartitions();
        if (partitions == Expected.UNKNOWN_PARTITIONS) {
            if (lengthBytes < ShuffleOutputTable.META_HEADER_BYTES + 8 || lengthBytes > Integer.MAX_VALUE - 8) {
                return "metadata of " + lengthBytes + " bytes";
            }
            return null;
        }
        if (regionCount < 0) {
            return regionCount + " regions";
        }
        long expected = ShuffleOutputTable.metadataBytes(regionCount, partitions);
        if (lengthBytes != expected || expected > Integer.MAX_VALUE - 8) {
            return "metadata of " + lengthBytes + " bytes, where " + regionCount + " regions and " + partitions
                    + " partitions take " + expected;
        }
        return null;
    }

    /** Bytes of the offsets of partitions {@code start..end} of {@code r}. */
    private static int windowBytes(Request r) {
        return (r.endPartition() - r.startPartition() + 1) * 8;
    }

    /**
     * Reads the offsets of the step's partitions at {@code b}'s position, checked against the map
     * output's length ({@link ShuffleOutputTable.Metadata#readOffsets}).
     *
     * @return what is wrong with them, or null
     */
    private String readWindow(Step s, ByteBuffer b, ShuffleOutputTable.Metadata m) {
        Request r = s.request;
        int n = r.endPartition() - r.startPartition();
        long[] out = ends;
        if (n >= 2) {
            if (s.window == null) {
                s.window = new long[n + 1];
            }
            out = s.window;
        }
        try {
            m.readOffsets(b, r.startPartition(), r.endPartition(), out);
        } catch (RuntimeException e) {
            return e.getMessage();
        }
        s.firstOffset = out[0];
        s.endOffset = out[n];
        return null;
    }

    private void addPiece(int region, int offset, int length) {
        RegionDescriptor d = filling.metadata.regions()[region];
        batch.add(d.address() + offset, d.rkey(), length, filling.buffer, fillAt, fillAt);
        fillAt += length;
    }

    private void post(Step s, RegisteredBuffer b) {
        Request r = s.request;
        s.buffer = b;
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
                case DATA -> {
                    filling = s;
                    fillAt = 0;
                    MapOutputLayout.forEachPiece(s.firstOffset, s.endOffset, s.metadata.maxRegionBytes(),
                            readBlockBytes, addPiece);
                    filling = null;
                }
                default -> throw new IllegalStateException("nothing to post in phase " + s.phase);
            }
        } catch (RuntimeException e) {
            batch.clear();
            s.releaseBuffer();
            ready.add(failure(r, "cannot build the " + s.phase.name().toLowerCase() + " READs", e));
            return;
        }
        s.reads = batch.size();
        s.armFor(s.reads);
        s.inFlight = true;
        s.postedNanos = System.nanoTime();
        s.peer.readsInFlight += s.reads;
        readsInFlight += s.reads;
        s.charged = b.capacity(); // what is taken from the pool, not what the READs need: the budget bounds memory
        bytesInFlight += s.charged;
        postedOrder.add(s);
        s.postedEntries++;
        try {
            postTo(s, batch);
        } catch (TransportException | RuntimeException e) {
            // Nothing was posted: no completion will come.
            s.inFlight = false;
            s.peer.readsInFlight -= s.reads;
            readsInFlight -= s.reads;
            bytesInFlight -= s.charged;
            s.releaseBuffer();
            ready.add(failure(r, "cannot post the " + s.phase.name().toLowerCase() + " READs", e));
        } finally {
            batch.clear();
        }
    }

    /** Posts one window of a streamed block: bytes {@code [at, at + size)} of the data file into {@code b}. */
    private void postWindow(Step w, RegisteredBuffer b, long at, int size) {
        w.buffer = b;
        w.windowAt = at;
        w.windowReady = false;
        try {
            filling = w;
            fillAt = 0;
            MapOutputLayout.forEachPiece(at, at + size, w.metadata.maxRegionBytes(), readBlockBytes, addPiece);
        } catch (RuntimeException e) {
            batch.clear();
            w.releaseBuffer();
            w.stream.fail(failure(w.request, "cannot build the data READs", e));
            return;
        } finally {
            filling = null;
        }
        w.reads = batch.size();
        w.bytes = size;
        w.charged = b.capacity();
        w.armFor(w.reads);
        w.inFlight = true;
        w.postedNanos = System.nanoTime();
        w.peer.readsInFlight += w.reads;
        readsInFlight += w.reads;
        bytesInFlight += w.charged;
        postedOrder.add(w);
        w.postedEntries++;
        try {
            postTo(w, batch);
        } catch (TransportException | RuntimeException e) {
            w.inFlight = false;
            w.peer.readsInFlight -= w.reads;
            readsInFlight -= w.reads;
            bytesInFlight -= w.charged;
            w.releaseBuffer();
            w.stream.fail(failure(w.request, "cannot post the data READs", e));
        } finally {
            batch.clear();
        }
    }

    /**
     * Posts to the peer's channel. A channel that closed itself after going unused while this task held
     * it (the transport's idle timeout: nothing was outstanding on it) is replaced once by a fresh one.
     */
    private void postTo(Step s, ReadBatch batch) throws TransportException {
        Peer p = s.peer;
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

    // ---- completions ----

    /**
     * A step's READs have all completed: queue it for the task thread, or, when the fetcher is
     * closed, return its buffer here. Never blocks. Runs on the transport's thread.
     */
    private void landed(Step s) {
        if (closed) {
            s.releaseBuffer();
            return;
        }
        landedSteps.add(s);
        if (closed) {
            drainLanded(); // close() may have drained before this step arrived
        }
    }

    private void drainLanded() {
        Step s;
        while ((s = landedSteps.poll()) != null) {
            s.releaseBuffer();
        }
    }

    /**
     * Takes up a landed step on the task thread: parses a slot or metadata and queues the next phase
     * first in its peer's line, or makes the block.
     *
     * @return the step's result (a {@link Block} or a {@link FetchFailure}), or null when it goes on
     */
    private Object takeUp(Step s) {
        s.inFlight = false;
        s.peer.readsInFlight -= s.reads;
        readsInFlight -= s.reads;
        prunePosted();
        int status = s.status;
        Request r = s.request;
        switch (s.phase) {
            case SLOT -> {
                bytesInFlight -= s.charged;
                ShuffleOutputTable.Slot slot;
                try {
                    if (status != ReadStatus.SUCCESS) {
                        return failure(r, "output table READ failed: " + ReadStatus.describe(status), null);
                    }
                    controlBytesRead += s.bytes;
                    slot = ShuffleOutputTable.Slot.parse(s.buffer.byteBuffer().duplicate().clear());
                } catch (RuntimeException e) {
                    return failure(r, "corrupt output table", e);
                } finally {
                    s.releaseBuffer();
                }
                if (!slot.published() && !slot.unregistered()) {
                    // Not written by a map task there: migrated there when another executor was
                    // decommissioned (Spark moved the files, not a registration), or lost.
                    return new Block(r, null, 0, 0, NOT_IN_TABLE, null);
                }
                if (r.mapId() != Request.ANY_MAP_ID && slot.mapId() != r.mapId()) {
                    // Another attempt of the map replaced it in the table (a retried or zombie attempt on the
                    // same executor); the attempt the tracker names may still be on disk: Spark's path reads
                    // it by its id, or fails the fetch if it is gone.
                    return new Block(r, null, 0, 0, "another attempt of the map replaced it in the peer's table",
                            null);
                }
                if (slot.unregistered()) {
                    // committed, left to Spark's path by the peer
                    return new Block(r, null, 0, 0, LEFT_UNREGISTERED, null);
                }
                RegionDescriptor md = slot.metadata();
                String wrongLength = checkMetadataLength(r, slot.regionCount(), md.length());
                if (wrongLength != null) {
                    s.mapId = slot.mapId();
                    return slotAgain(s, "corrupt output table: " + wrongLength); // or torn by a rewrite
                }
                long headBytes = ShuffleOutputTable.offsetPosition(slot.regionCount(), 0);
                if (slot.regionCount() < 0 || headBytes + (long) r.endPartition() * 8 + 8 > md.length()
                        || r.startPartition() < 0
                        || r.startPartition() > r.endPartition()) {
                    return failure(r, "partition range outside the map output: metadata of " + md.length()
                            + " bytes for " + slot.regionCount() + " regions", null);
                }
                if (headBytes + windowBytes(r) > pool.options().maxRegisteredBytes()) {
                    // no buffer this pool could ever give holds it: the peer's table is wrong, not this executor
                    s.mapId = slot.mapId();
                    return slotAgain(s, "corrupt output table: " + slot.regionCount() + " regions, whose "
                            + "descriptors alone exceed the receive pool's cap of "
                            + pool.options().maxRegisteredBytes() + " bytes");
                }
                s.phase = Phase.METADATA;
                s.mapId = slot.mapId();
                s.metadataRegion = md;
                s.headBytes = (int) headBytes;
                s.reads = r.startPartition() == 0 ? 1 : 2;
                s.bytes = s.headBytes + windowBytes(r);
                s.peer.waiting.addFirst(s);
                return null;
            }
            case METADATA -> {
                bytesInFlight -= s.charged;
                ShuffleOutputTable.Metadata m;
                String wrongOffsets;
                try {
                    if (status != ReadStatus.SUCCESS) {
                        // the slot may have been torn by a rewrite and named a withdrawn region: look again
                        return slotAgain(s, "metadata READ failed: " + ReadStatus.describe(status));
                    }
                    controlBytesRead += s.bytes;
                    ByteBuffer landed = s.buffer.byteBuffer().duplicate().clear().limit(s.bytes);
                    long metaMapId = landed.getLong(16);
                    if (metaMapId != s.mapId) {
                        // The slot READ overlapped its rewrite (a map attempt republished): READ it again.
                        return slotAgain(s, "the output table slot names map attempt " + s.mapId + " but its "
                                + "metadata attempt " + metaMapId);
                    }
                    try {
                        m = ShuffleOutputTable.Metadata.parse(landed.duplicate().limit(s.headBytes),
                                s.metadataRegion);
                    } catch (RuntimeException e) {
                        return metadataAgain(s, null, "corrupt map output metadata: " + e.getMessage());
                    }
                    if (ShuffleOutputTable.offsetPosition(m.regions().length, 0) != s.headBytes) {
                        return metadataAgain(s, null, "corrupt map output metadata: " + m.regions().length
                                + " regions, the output table slot names another count");
                    }
                    int partitions = r.expected().numPartitions();
                    if (partitions != Expected.UNKNOWN_PARTITIONS && m.numPartitions() != partitions) {
                        return metadataAgain(s, null, "corrupt map output metadata: " + m.numPartitions()
                                + " partitions in a shuffle of " + partitions);
                    }
                    if (r.endPartition() > m.numPartitions()) {
                        return failure(r, "partition range outside the map output's " + m.numPartitions(), null);
                    }
                    wrongOffsets = readWindow(s, landed.position(s.headBytes), m);
                } catch (RuntimeException e) {
                    return failure(r, "corrupt map output metadata", e);
                } finally {
                    s.releaseBuffer();
                }
                if (wrongOffsets != null) {
                    return metadataAgain(s, null, wrongOffsets);
                }
                metadataCache.put(r.peer(), r.table().rkey(), r.mapIndex(), s.mapId, m);
                Object done = toData(s, m);
                if (done != null) {
                    return done;
                }
                s.peer.waiting.addFirst(s);
                return null;
            }
            case OFFSETS -> {
                bytesInFlight -= s.charged;
                String wrongOffsets;
                try {
                    if (status != ReadStatus.SUCCESS) {
                        // the cached metadata's region is gone: the output was withdrawn or replaced
                        return failure(r, "offsets READ failed: " + ReadStatus.describe(status), null);
                    }
                    controlBytesRead += s.bytes;
                    wrongOffsets = readWindow(s, s.buffer.byteBuffer().duplicate().clear().limit(s.bytes),
                            s.metadata);
                } finally {
                    s.releaseBuffer();
                }
                if (wrongOffsets != null) {
                    return metadataAgain(s, s.metadata, wrongOffsets);
                }
                Object done = toData(s, s.metadata);
                if (done != null) {
                    return done;
                }
                s.peer.waiting.addFirst(s);
                return null;
            }
            case DATA -> {
                if (status != ReadStatus.SUCCESS) {
                    bytesInFlight -= s.charged;
                    s.releaseBuffer();
                    return failure(r, "data READ failed: " + ReadStatus.describe(status), null);
                }
                RegisteredBuffer b = s.buffer;
                s.buffer = null; // the block owns it now; its bytes stay in the budget until it is closed
                return new Block(r, b, s.bytes, s.landedNanos - s.postedNanos, s.window);
            }
            case WINDOW -> {
                s.stream.landed(s, status);
                return null;
            }
            default -> throw new IllegalStateException("a step landed in phase " + s.phase);
        }
    }

    /**
     * Queues {@code s} to READ its slot again — what it saw may have been torn by a rewrite of the slot
     * (a READ of it is not atomic) — or, after {@link #MAX_TORN_SLOT_READS} such READs in a row, fails it.
     *
     * @return null when queued, else the failure
     */
    private Object slotAgain(Step s, String why) {
        if (++s.tornSlotReads > MAX_TORN_SLOT_READS) {
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
     * is, up to {@link #MAX_TORN_SLOT_READS} times in a row, before the request fails. Counted in
     * {@link #metadataReadsAgain()}.
     *
     * @param cached the cached metadata the window was READ with (dropped from the cache), or null
     * @return null when queued, else the failure
     */
    private Object metadataAgain(Step s, ShuffleOutputTable.Metadata cached, String why) {
        Request r = s.request;
        if (cached != null) {
            metadataCache.forget(r.peer(), r.table().rkey(), r.mapIndex(), cached);
            s.metadata = null;
        }
        metadataReadsAgain++;
        return slotAgain(s, why);
    }

    /** Metadata or offsets windows READ again because what landed did not make sense ({@link #metadataAgain}). */
    public long metadataReadsAgain() {
        return metadataReadsAgain;
    }

    /** Bytes this fetcher READ from output tables and metadata regions (not block data). */
    public long controlBytesRead() {
        return controlBytesRead;
    }

    /** Bytes of the pool taken by buffers of READs in flight and of blocks not yet closed. */
    public long bytesInFlight() {
        return bytesInFlight;
    }

    /** READs posted and not yet taken up, to every peer. */
    public int readsInFlight() {
        return readsInFlight;
    }

    /**
     * Stops posting and returns every buffer: those of blocks that arrived but were not taken with
     * {@link #next}, those of READs that landed now, and — through their completions — those of READs
     * still in flight. Blocks already handed out stay valid until closed. Idempotent.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        for (Peer p : peerList) {
            p.waiting.clear(); // steps waiting to be posted hold no buffer
        }
        postedOrder.clear();
        RuntimeException error = null;
        Object result;
        while ((result = ready.poll()) != null) {
            if (result instanceof Block b) {
                try {
                    b.close();
                } catch (RuntimeException e) {
                    error = keepFirst(error, e);
                }
            }
        }
        try {
            drainLanded();
        } catch (RuntimeException e) {
            error = keepFirst(error, e);
        }
        if (error != null) {
            throw error;
        }
    }

    private static RuntimeException keepFirst(RuntimeException first, RuntimeException later) {
        if (first == null) {
            return later;
        }
        first.addSuppressed(later);
        return first;
    }
}
