package org.rdmashuffle.shuffle.core.fetch;

import java.util.ArrayDeque;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.RegisteredBuffer;

/**
 * The pooled buffers of one {@link BlockFetcher}, and the one place that gives them back to the pool.
 * Every {@code release()} of a fetcher's buffer is in this class.
 *
 * <p><b>Who holds a buffer, and who releases it.</b> The task thread takes a buffer from the pool for
 * one phase of a request (a slot, metadata, offsets or data READ) or one window of a streamed block;
 * from then until it goes back it is charged to the {@link FetchBudget}. In each state:
 * <ol>
 *   <li><i>Taken, READs not posted</i> — building or posting them failed: the step holds it and no
 *       completion will come; the task thread releases it at once ({@link #giveBack(FetchStep)}).
 *   <li><i>Posted, READs in flight</i> — the transport writes into it; the step holds the reference.
 *       Nobody releases it: its last completion decides ({@link #landed}). A post that threw after the
 *       channel may have accepted some READs is the same ({@link #withhold}): the step keeps the buffer
 *       until its last READ lands, however its request ended.
 *   <li><i>Landed, fetcher open</i> — the completion thread queues the step for the task thread and
 *       touches the buffer no more. The task thread takes it up: a slot, metadata or offsets buffer,
 *       and that of a failed data or window READ, it releases as soon as it is parsed
 *       ({@link #giveBack(FetchStep)}); a data buffer passes to its block ({@link #handToBlock}); a
 *       window's stays with its stream until read.
 *   <li><i>Landed after close</i> — the completion thread releases it itself ({@link #landed}); a step
 *       queued before close is released by {@link #close} on the task thread, or, when it was queued
 *       while close drained, by the completion that queued it. A queued step is polled once, so its
 *       buffer goes back once, by whichever thread polled it.
 *   <li><i>In a block not yet handed out</i> (landed, or queued behind a failure): the fetcher holds
 *       it; {@link #close} releases it.
 *   <li><i>In a block handed out by {@link BlockFetcher#next}</i>: the caller holds it; the block's
 *       {@code close()} releases it on the task thread ({@link #giveBack(RegisteredBuffer, long)}), also
 *       after the fetcher closed — a block handed out stays valid until closed.
 *   <li><i>A window at hand in a stream</i>: the stream holds it; read to its end, or the stream closed,
 *       failed or its fetcher closed, the task thread releases it ({@link #giveBack(FetchStep)}) — or, read
 *       to its end while the stream holds no other window, passes it to the next window ({@link #detach}).
 *       A window still in flight then comes back as it lands (state 3 or 4).
 * </ol>
 * A step waiting to be posted holds no buffer. Once the fetcher is closed the budget is no longer kept:
 * buffers given back after close are released but not uncharged.
 *
 * <p><b>Threads.</b> Everything here runs on the task thread but {@link #landed}, which runs on the
 * transport's thread, never blocks and never waits for the pool.
 */
final class FetchBuffers {
    private final BufferPool pool;
    private final FetchBudget budget;
    /** Steps whose READs all completed, for the task thread; drained by close. */
    private final LinkedBlockingQueue<FetchStep> landedSteps = new LinkedBlockingQueue<>();
    private volatile boolean closed;
    /** Buffers {@link #withhold withheld} after a post threw (task thread). */
    private long withheld;

    FetchBuffers(BufferPool pool, FetchBudget budget) {
        this.pool = pool;
        this.budget = budget;
    }

    boolean closed() {
        return closed;
    }

    /** A buffer for {@code bytes} if the pool has one at hand, else null. */
    RegisteredBuffer tryAcquire(int bytes) {
        return pool.tryAcquire(bytes);
    }

    /** A buffer for {@code bytes}, waiting for the pool up to its acquire timeout. */
    RegisteredBuffer acquire(int bytes) {
        return pool.acquire(bytes);
    }

    /** {@code s} holds {@code b} for its next READs, charged to the budget what it takes from the pool (state 1). */
    void attach(FetchStep s, RegisteredBuffer b) {
        s.buffer = b;
        s.charged = b.capacity(); // what is taken from the pool, not what the READs need: the budget bounds memory
        budget.charge(s.charged);
    }

    /**
     * Releases the buffer {@code s} holds, if any, and uncharges it unless closed: its READs were never
     * posted, or were taken up (task thread). Not for a {@link #withhold withheld} step, whose READs may still
     * land: its buffer goes back when they did.
     */
    void giveBack(FetchStep s) {
        if (s.abandoned) {
            return;
        }
        if (s.buffer != null) {
            release(s);
            if (!closed) {
                budget.uncharge(s.charged);
            }
        }
    }

    /**
     * A post of {@code s} threw after the channel may have accepted some of its READs (state 2b): the step keeps
     * its buffer, uncharged, until its last READ completes; then whoever takes the landed step up releases it
     * ({@link #abandonedLanded}, or {@link #landed} after close). If some READs were never accepted, none lands
     * and the buffer stays out of the pool: memory a READ may still write into is never reused.
     */
    void withhold(FetchStep s) {
        s.abandoned = true;
        withheld++;
        if (!closed) {
            budget.uncharge(s.charged);
        }
    }

    /**
     * Buffers {@link #withhold withheld} so far: each stays out of the pool until its READs land, for good when
     * some were never accepted (no completion comes for those).
     */
    long withheld() {
        return withheld;
    }

    /** A {@link #withhold withheld} step's READs all completed: its buffer goes back (task thread). */
    void abandonedLanded(FetchStep s) {
        s.abandoned = false;
        release(s);
    }

    /**
     * Takes the buffer of a window read to its end, uncharged, for the stream's next window, which charges it
     * again when it is attached (state 7: the stream keeps holding it).
     */
    RegisteredBuffer detach(FetchStep s) {
        RegisteredBuffer b = s.buffer;
        s.buffer = null;
        if (!closed) {
            budget.uncharge(s.charged);
        }
        return b;
    }

    /** Takes a landed data step's buffer for its block, which holds it (and its charge) until closed. */
    RegisteredBuffer handToBlock(FetchStep s) {
        RegisteredBuffer b = s.buffer;
        s.buffer = null;
        return b;
    }

    /** Releases a closed block's buffer (null for one without bytes) and uncharges it unless closed (task thread). */
    void giveBack(RegisteredBuffer b, long charged) {
        if (b != null) {
            b.release();
        }
        if (!closed) {
            budget.uncharge(charged);
        }
    }

    /**
     * A step's READs have all completed: queue it for the task thread, or, when the fetcher is closed,
     * return its buffer here. Never blocks. Runs on the transport's thread.
     */
    void landed(FetchStep s) {
        if (closed) {
            release(s);
            return;
        }
        landedSteps.add(s);
        if (closed) {
            drainLanded(); // close() may have drained before this step arrived
        }
    }

    /** Whether READs have landed that the task has not taken up; any thread. */
    boolean hasLanded() {
        return !landedSteps.isEmpty();
    }

    /** A landed step, or null. */
    FetchStep pollLanded() {
        return landedSteps.poll();
    }

    /** A landed step, waiting up to {@code nanos} for one; null if none landed. */
    FetchStep pollLanded(long nanos) throws InterruptedException {
        return landedSteps.poll(nanos, TimeUnit.NANOSECONDS);
    }

    /**
     * Closes: from now on completions release their own buffers. Releases the buffers of blocks in
     * {@code ready} (results the caller never took) and of steps that landed and were not taken up.
     *
     * @throws RuntimeException the first error releasing them, later ones suppressed
     */
    void close(ArrayDeque<Object> ready) {
        closed = true;
        RuntimeException error = null;
        Object result;
        while ((result = ready.poll()) != null) {
            if (result instanceof BlockFetcher.Block b) {
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

    private void drainLanded() {
        FetchStep s;
        while ((s = landedSteps.poll()) != null) {
            release(s);
        }
    }

    /** Returns the step's buffer, once; by the task thread, or by whoever drains a closed fetcher's steps. */
    private static void release(FetchStep s) {
        RegisteredBuffer b = s.buffer;
        if (b != null) {
            s.buffer = null;
            b.release();
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
