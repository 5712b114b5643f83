package org.rdmashuffle.shuffle;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/**
 * Fetches ranges of partitions of remote map outputs with one-sided READs only: the map index's
 * slot in the serving executor's {@link ShuffleOutputTable}, then the output's metadata (both cached
 * in a {@link MetadataCache}, one per shuffle on an executor), then the bytes, into pooled registered buffers. Data READs are bounded by
 * {@code maxBytesInFlight} (a single block larger than the bound goes alone). Finished blocks come
 * out of {@link #next} in completion order, so consuming one overlaps fetching the others.
 *
 * <p>One fetcher serves one reduce task: {@link #add} and {@link #next} from the task's thread;
 * completions run on the transport's thread.
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
     */
    public record Request(NodeAddress peer, RegionDescriptor table, int mapIndex, long mapId, int startPartition,
                          int endPartition) {
        /** Accept whichever attempt the serving executor published. */
        public static final long ANY_MAP_ID = -1;
    }

    /** A fetched block: its bytes are {@code buffer().byteBuffer()} from 0 to {@link #length()}. */
    public final class Block implements AutoCloseable {
        private final Request request;
        private final RegisteredBuffer buffer;
        private final int length;
        private final long readNanos;
        private boolean released;

        Block(Request request, RegisteredBuffer buffer, int length, long readNanos) {
            this.request = request;
            this.buffer = buffer;
            this.length = length;
            this.readNanos = readNanos;
        }

        /** Time from posting the block's data READs to their last completion. */
        public long readNanos() {
            return readNanos;
        }

        public Request request() {
            return request;
        }

        public int length() {
            return length;
        }

        /** The bytes (a view: position 0, limit {@link #length()}); valid until {@link #close()}. */
        public ByteBuffer bytes() {
            return buffer == null ? ByteBuffer.allocate(0) : buffer.byteBuffer().duplicate().clear().limit(length);
        }

        /** Returns the buffer to the pool and the bytes to the in-flight budget. */
        @Override
        public void close() {
            if (released) {
                return;
            }
            released = true;
            if (buffer != null) {
                buffer.release();
            }
            releaseBudget(length);
        }
    }

    private record Pending(Request request, RdmaChannel channel, ShuffleOutputTable.Metadata metadata, int bytes) {
    }

    private final RdmaNode node;
    private final BufferPool pool;
    private final long maxBytesInFlight;
    private final int readBlockBytes;
    private final long timeoutMs;
    private final MetadataCache metadataCache;
    private final LongAdder controlBytesRead = new LongAdder();
    private final LinkedBlockingQueue<Object> done = new LinkedBlockingQueue<>();
    private final ArrayDeque<Pending> waitingForBudget = new ArrayDeque<>();
    private long bytesInFlight;
    private int outstanding;
    private boolean closed;

    /** A fetcher with a metadata cache of its own. */
    public BlockFetcher(RdmaNode node, BufferPool pool, long maxBytesInFlight, int readBlockBytes, long timeoutMs) {
        this(node, pool, new MetadataCache(), maxBytesInFlight, readBlockBytes, timeoutMs);
    }

    /** A fetcher sharing {@code metadataCache} (one per shuffle on an executor) with other fetchers. */
    public BlockFetcher(RdmaNode node, BufferPool pool, MetadataCache metadataCache, long maxBytesInFlight,
                        int readBlockBytes, long timeoutMs) {
        this.metadataCache = metadataCache;
        this.node = node;
        this.pool = pool;
        this.maxBytesInFlight = maxBytesInFlight;
        this.readBlockBytes = readBlockBytes;
        this.timeoutMs = timeoutMs;
    }

    /** Starts fetching {@code r}; its block (or failure) comes out of {@link #next}. */
    public void add(Request r) {
        synchronized (this) {
            if (closed) {
                throw new IllegalStateException("fetcher closed");
            }
            outstanding++;
        }
        RdmaChannel ch;
        try {
            ch = node.connect(r.peer()); // on the task's thread: completions never wait for a connect
        } catch (TransportException e) {
            fail(r, "cannot connect", e);
            return;
        }
        ShuffleOutputTable.Metadata m = metadataCache.get(r.peer(), r.table().rkey(), r.mapIndex(), r.mapId());
        if (m != null) {
            fetchData(r, ch, m);
        } else {
            fetchSlot(r, ch);
        }
    }

    /** Blocks still to come out of {@link #next}. */
    public synchronized int outstanding() {
        return outstanding;
    }

    /**
     * The next finished block, waiting up to the request timeout.
     *
     * @throws FetchFailure naming the request when it failed or nothing arrived in time
     */
    public Block next() throws FetchFailure, InterruptedException {
        Object o = done.poll(timeoutMs, TimeUnit.MILLISECONDS);
        if (o == null) {
            throw new FetchFailure(null, "no block arrived within " + timeoutMs + " ms", null);
        }
        synchronized (this) {
            outstanding--;
        }
        if (o instanceof FetchFailure f) {
            throw f;
        }
        return (Block) o;
    }

    private void fail(Request r, String what, Throwable cause) {
        done.add(new FetchFailure(r, what + " (map index " + r.mapIndex() + " at " + r.peer() + ")", cause));
    }

    private void fetchSlot(Request r, RdmaChannel ch) {
        RegisteredBuffer b;
        try {
            b = pool.acquire(ShuffleOutputTable.SLOT_BYTES);
            long at = r.table().address() + (long) r.mapIndex() * ShuffleOutputTable.SLOT_BYTES;
            ch.post(new ReadBatch(1).add(at, r.table().rkey(), ShuffleOutputTable.SLOT_BYTES, b, 0, 0),
                    (id, st, len) -> onSlot(r, ch, b, st, len));
        } catch (TransportException | RuntimeException e) {
            fail(r, "cannot read the output table", e);
        }
    }

    private void onSlot(Request r, RdmaChannel ch, RegisteredBuffer b, int status, int length) {
        ShuffleOutputTable.Slot slot;
        try {
            if (status != ReadStatus.SUCCESS) {
                fail(r, "output table READ failed: " + ReadStatus.describe(status), null);
                return;
            }
            controlBytesRead.add(length);
            slot = ShuffleOutputTable.Slot.parse(b.byteBuffer().duplicate().clear());
        } catch (RuntimeException e) {
            fail(r, "corrupt output table", e);
            return;
        } finally {
            b.release();
        }
        if (!slot.published()) {
            fail(r, "map output not registered at the peer (lost or never written)", null);
            return;
        }
        if (r.mapId() != Request.ANY_MAP_ID && slot.mapId() != r.mapId()) {
            fail(r, "the peer serves map attempt " + slot.mapId() + ", not attempt " + r.mapId()
                    + " that the MapOutputTracker names", null);
            return;
        }
        RegionDescriptor md = slot.metadata();
        try {
            RegisteredBuffer mb = pool.acquire((int) md.length());
            ch.post(new ReadBatch(1).add(md.address(), md.rkey(), (int) md.length(), mb, 0, 0),
                    (id, st, len) -> onMetadata(r, ch, mb, slot.mapId(), (int) md.length(), st));
        } catch (TransportException | RuntimeException e) {
            fail(r, "cannot read map output metadata", e);
        }
    }

    private void onMetadata(Request r, RdmaChannel ch, RegisteredBuffer b, long mapId, int length, int status) {
        ShuffleOutputTable.Metadata m;
        try {
            if (status != ReadStatus.SUCCESS) {
                fail(r, "metadata READ failed: " + ReadStatus.describe(status), null);
                return;
            }
            controlBytesRead.add(length);
            m = ShuffleOutputTable.Metadata.parse(b.byteBuffer().duplicate().clear().limit(length));
        } catch (RuntimeException e) {
            fail(r, "corrupt map output metadata", e);
            return;
        } finally {
            b.release();
        }
        metadataCache.put(r.peer(), r.table().rkey(), r.mapIndex(), mapId, m);
        fetchData(r, ch, m);
    }

    private void fetchData(Request r, RdmaChannel ch, ShuffleOutputTable.Metadata m) {
        long bytes;
        try {
            bytes = m.layout().bytesOf(r.startPartition(), r.endPartition());
        } catch (RuntimeException e) {
            fail(r, "partition range outside the map output", e);
            return;
        }
        if (bytes == 0) {
            done.add(new Block(r, null, 0, 0));
            return;
        }
        if (bytes > Integer.MAX_VALUE - 8) {
            fail(r, "block of " + bytes + " bytes exceeds 2 GiB", null);
            return;
        }
        synchronized (this) {
            if (bytesInFlight > 0 && bytesInFlight + bytes > maxBytesInFlight) {
                waitingForBudget.add(new Pending(r, ch, m, (int) bytes));
                return;
            }
            bytesInFlight += bytes;
        }
        readData(r, ch, m, (int) bytes);
    }

    private void readData(Request r, RdmaChannel ch, ShuffleOutputTable.Metadata m, int bytes) {
        RegisteredBuffer b;
        try {
            b = pool.acquire(bytes);
        } catch (RuntimeException e) {
            releaseBudget(bytes);
            fail(r, "no buffer for the block", e);
            return;
        }
        ReadBatch batch = new ReadBatch(8);
        int[] at = {0};
        m.layout().forEachPiece(r.startPartition(), r.endPartition(), readBlockBytes, (region, off, len) -> {
            RegionDescriptor d = m.regions()[region];
            batch.add(d.address() + off, d.rkey(), len, b, at[0], at[0]);
            at[0] += len;
        });
        int[] left = {batch.size()};
        long posted = System.nanoTime();
        int[] firstError = {ReadStatus.SUCCESS};
        try {
            ch.post(batch, (id, st, len) -> {
                if (st != ReadStatus.SUCCESS && firstError[0] == ReadStatus.SUCCESS) {
                    firstError[0] = st;
                }
                if (--left[0] == 0) {
                    if (firstError[0] == ReadStatus.SUCCESS) {
                        done.add(new Block(r, b, bytes, System.nanoTime() - posted));
                    } else {
                        b.release();
                        releaseBudget(bytes);
                        fail(r, "data READ failed: " + ReadStatus.describe(firstError[0]), null);
                    }
                }
            });
        } catch (TransportException | RuntimeException e) {
            b.release();
            releaseBudget(bytes);
            fail(r, "cannot post data READs", e);
        }
    }

    private void releaseBudget(long bytes) {
        ArrayDeque<Pending> start = null;
        synchronized (this) {
            bytesInFlight -= bytes;
            Pending p;
            while ((p = waitingForBudget.peek()) != null
                    && (bytesInFlight == 0 || bytesInFlight + p.bytes() <= maxBytesInFlight)) {
                waitingForBudget.poll();
                bytesInFlight += p.bytes();
                if (start == null) {
                    start = new ArrayDeque<>();
                }
                start.add(p);
            }
        }
        if (start != null) {
            for (Pending p : start) {
                readData(p.request(), p.channel(), p.metadata(), p.bytes());
            }
        }
    }

    /** Bytes this fetcher READ from output tables and metadata regions (not block data). */
    public long controlBytesRead() {
        return controlBytesRead.sum();
    }

    /** Bytes of data READs outstanding or held in blocks not yet closed. */
    public synchronized long bytesInFlight() {
        return bytesInFlight;
    }

    /** Releases blocks never taken out; later completions release their own buffers. */
    @Override
    public void close() {
        synchronized (this) {
            closed = true;
            waitingForBudget.clear();
        }
        Object o;
        while ((o = done.poll()) != null) {
            if (o instanceof Block b) {
                b.close();
            }
        }
    }
}
