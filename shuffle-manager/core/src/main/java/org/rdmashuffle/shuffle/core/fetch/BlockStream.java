package org.rdmashuffle.shuffle.core.fetch;

import java.io.InputStream;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.ReadStatus;

/**
 * The windows of a block larger than the pool's largest buffer ({@link BlockFetcher.Block#streamed()}):
 * bytes {@code [first, end)} of the data file, READ a window of the largest buffer size at a time into at
 * most {@link #STREAM_WINDOWS} pooled buffers, read in order; each buffer goes back to the pool as soon as
 * it is read, and the next window's READ is posted then. The windows count in the byte budget, but one
 * window always goes, so a stream never waits on other blocks' budget; and a window read to its end while the
 * stream holds no other passes its buffer on to the next window, so once its first window is taken a stream
 * never waits for the pool (which blocks this task took up while the stream waited may hold). Task thread only,
 * but for the windows' completions (through {@link FetchBuffers}). Nothing is allocated per window: the window
 * steps are made once per stream and reused.
 *
 * <p><b>Lifetime.</b> A stream's windows are READ through its fetcher (its budget, its peers' channels, its
 * queue of landed READs), so a streamed block ends with its fetcher: when the fetcher closes, the windows at
 * hand go back at once, those in flight as they land, and the block's reads fail ({@link #fetcherClosed}).
 *
 * <p><b>Timeout.</b> A read waits for its window up to the request timeout, counted from the post of that
 * window or the last landing of one of this stream's windows — not from other requests' landings, which say
 * nothing about this stream's peer.
 */
final class BlockStream {
    /** Window buffers (of the pool's largest size) one streamed block holds at most: posted, landed or read. */
    static final int STREAM_WINDOWS = 3;

    private final RequestStateMachine steps;
    private final FetchBuffers buffers;
    private final BlockFetcher.Request request;
    private final FetchPeer peer;
    private final ShuffleOutputTable.Metadata metadata;
    private final long first;
    private final long end;
    private final FetchStep[] windows = new FetchStep[STREAM_WINDOWS];
    /** Windows posted, and windows read and given back (window k is in {@code windows[k % N]}). */
    private long posted;
    private long taken;
    /** Where the next window starts in the data file. */
    private long postAt;
    /** Bytes of the block read so far; where the current window's unread bytes begin in it. */
    private long position;
    private boolean reading;
    private int readAt;
    private int readLimit;
    private long readNanos;
    private long waitNanos;
    private FetchFailure failed;
    private boolean streamClosed;

    BlockStream(RequestStateMachine steps, BlockFetcher.Request request, FetchPeer peer,
                ShuffleOutputTable.Metadata metadata, long first, long end) {
        this.steps = steps;
        this.buffers = steps.buffers;
        this.request = request;
        this.peer = peer;
        this.metadata = metadata;
        this.first = first;
        this.end = end;
        this.postAt = first;
    }

    /** Time from posting each window taken so far to its last completion, summed. */
    long readNanos() {
        return readNanos;
    }

    /** Time reads waited for windows to land so far. */
    long waitNanos() {
        return waitNanos;
    }

    InputStream range(long from, long to) {
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
    private final class Range extends InputStream {
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
            Objects.checkFromIndexSize(off, len, b.length);
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
    private boolean advance() {
        if (failed != null) {
            throw new BlockFetcher.StreamFailed(failed);
        }
        if (streamClosed) {
            throw new IllegalStateException("block closed");
        }
        if (buffers.closed()) {
            throw new IllegalStateException("fetcher closed: a streamed block's windows are READ by its fetcher and "
                    + "end with it");
        }
        if (reading && readAt < readLimit) {
            return true;
        }
        RegisteredBuffer carried = null;
        if (reading) {
            FetchStep w = windows[(int) (taken % STREAM_WINDOWS)];
            reading = false;
            taken++;
            if (posted == taken && postAt < end) {
                w.windowReady = false;
                carried = buffers.detach(w); // the only window held: its buffer carries the next one
            } else {
                giveBack(w);
            }
        }
        if (position == end - first) {
            return false;
        }
        fill(carried);
        FetchStep w = windows[(int) (taken % STREAM_WINDOWS)];
        long timeoutMs = steps.timeoutMs;
        long timeoutNanos = TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        long waitFrom = System.nanoTime();
        long since = waitFrom; // this stream's last landing; the wait counts running time from it (Pauses)
        while (!w.windowReady && failed == null) {
            long now = System.nanoTime(); // before looking: a pause between them is counted out
            long left = since + timeoutNanos + Pauses.pausedSince(since) - now;
            FetchStep l;
            try {
                l = left <= 0 ? null : buffers.pollLanded(left);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted while fetching a shuffle block", e);
            }
            if (l == null && left > 0) {
                continue; // time left again, counting a pause of this JVM meanwhile out of it
            }
            if (l == null) {
                fail(RequestStateMachine.failure(request, FetchFailure.Kind.TIMEOUT, "no block arrived within "
                        + timeoutMs + " ms (the window at byte " + position + " of a streamed block of "
                        + (end - first) + " bytes)", null));
                break;
            }
            if (l.stream == this) {
                since = System.nanoTime(); // only this stream's own windows say its peer answers
            }
            steps.takeUpLanded(l);
        }
        waitNanos += System.nanoTime() - waitFrom;
        if (failed != null) {
            throw new BlockFetcher.StreamFailed(failed);
        }
        reading = true;
        readAt = 0;
        readLimit = w.bytes;
        fill(null); // the window just taken may have made room for the next ones
        return true;
    }

    /**
     * Posts the next windows while this stream holds fewer than {@link #STREAM_WINDOWS} and budgets allow.
     *
     * @param carried the buffer of the window just read, when the stream held no other: the next window goes
     *     into it, without asking the pool; else null
     */
    private void fill(RegisteredBuffer carried) {
        while (posted - taken < STREAM_WINDOWS && postAt < end) {
            int size = (int) Math.min(steps.windowBytes, end - postAt);
            boolean alone = posted == taken; // the stream holds nothing: it goes on whatever the budgets
            if (!alone && steps.budget.windowWaits(peer, size)) {
                return;
            }
            RegisteredBuffer b;
            if (carried != null) {
                b = carried;
                carried = null;
            } else {
                b = alone ? buffers.acquire(size) : buffers.tryAcquire(size);
            }
            if (b == null) {
                return;
            }
            int slot = (int) (posted % STREAM_WINDOWS);
            FetchStep w = windows[slot];
            if (w == null) {
                w = new FetchStep(buffers, request, peer);
                w.phase = FetchStep.Phase.WINDOW;
                w.stream = this;
                w.metadata = metadata;
                windows[slot] = w;
            }
            FetchFailure f = steps.poster.postWindow(w, b, postAt, size);
            if (f != null) {
                fail(f);
            }
            if (failed != null) {
                throw new BlockFetcher.StreamFailed(failed);
            }
            postAt += size;
            posted++;
        }
    }

    /** A landed window taken up on the task thread. */
    void landed(FetchStep w, int status) {
        if (streamClosed || failed != null || buffers.closed()) {
            giveBack(w);
            return;
        }
        if (status == ReadStatus.IDLE_CLOSED && !w.postedAgainAfterClose) {
            // The channel closed before serving the window's READs (see RequestStateMachine.takeUp): posted once
            // more into the same buffer, where ReadPoster connects again; charged again by the post.
            w.postedAgainAfterClose = true;
            steps.budget.uncharge(w.charged);
            FetchFailure f = steps.poster.postWindow(w, w.buffer, w.windowAt, w.bytes);
            if (f != null) {
                fail(f);
            }
            return;
        }
        if (status != ReadStatus.SUCCESS) {
            giveBack(w);
            fail(RequestStateMachine.failure(request, FetchFailure.Kind.WINDOW, "data READ failed at byte "
                    + (w.windowAt - first) + " of a streamed block of " + (end - first) + " bytes: "
                    + ReadStatus.describe(status), null));
            return;
        }
        readNanos += w.landedNanos() - w.postedNanos;
        w.postedAgainAfterClose = false; // the step is reused for a later window, which may post again once
        w.windowReady = true;
    }

    private void giveBack(FetchStep w) {
        w.windowReady = false;
        buffers.giveBack(w);
    }

    /** Gives back every window at hand; those in flight come back as they land. */
    private void releaseHeld() {
        for (FetchStep w : windows) {
            if (w != null && !w.inFlight) {
                giveBack(w);
            }
        }
        reading = false;
    }

    /** The fetcher closed: the windows at hand go back now, those in flight as they land; reads fail from now on. */
    void fetcherClosed() {
        releaseHeld();
    }

    private void fail(FetchFailure f) {
        if (failed == null) {
            failed = f;
        }
        releaseHeld();
    }

    void close() {
        if (streamClosed) {
            return;
        }
        streamClosed = true;
        releaseHeld();
        steps.streamClosed(this);
    }
}
