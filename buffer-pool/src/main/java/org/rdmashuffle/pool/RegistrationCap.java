package org.rdmashuffle.pool;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import org.rdmashuffle.conf.ByteSizes;

/**
 * The cap on registered memory, and what an acquire does at it. The cap is {@code maxRegisteredBytes},
 * or what the host let the pool register when it last refused more (allocating or registering a chunk
 * failed), for {@link #HOST_LIMIT_HOLD_NANOS}; then the pool asks the host again.
 *
 * <p>At the cap, room is made by taking back what thread caches hold and deregistering chunks none of
 * whose buffers is out, whatever their class ({@link #makeRoom}); then an acquire that may wait waits
 * up to {@code acquireTimeoutMs} for a release ({@link #awaitRelease}), then fails with a
 * {@link BufferPoolException} naming the cap and the keys to change. A thread that may wait announces
 * itself ({@link #announceWaiter}) before its last look at the thread caches; from then on releases
 * bypass the caches (see {@code BufferPool.recycle}), so no buffer sits in a cache while a waiter
 * sleeps. Everything here but {@link #hasWaiters} is called with the pool lock held.
 */
final class RegistrationCap {
    /** How long a refusal of the host stands before the pool asks for more memory again. */
    static final long HOST_LIMIT_HOLD_NANOS = TimeUnit.SECONDS.toNanos(10);

    private final BufferPoolOptions options;
    private final ChunkStore store;
    private final ThreadCaches caches;
    private final LeakDetector leaks;
    private final Condition released;
    private volatile int waiters;

    // Guarded by the pool lock.
    /** What the host let the pool register when it last refused more; the cap until {@link #hostLimitUntilNanos}. */
    private long hostLimitBytes = Long.MAX_VALUE;
    private long hostLimitUntilNanos;
    private BufferPoolException hostRefusal;
    private long waits;
    private long timeouts;
    private long hostRefusals;

    RegistrationCap(BufferPoolOptions options, ReentrantLock lock, ChunkStore store, ThreadCaches caches,
                    LeakDetector leaks) {
        this.options = options;
        this.released = lock.newCondition();
        this.store = store;
        this.caches = caches;
        this.leaks = leaks;
    }

    /** Notes that the host refused more memory: what is registered now is the cap for a while. */
    void hostRefused(BufferPoolException e) {
        if (!e.memoryUnavailable()) {
            throw e;
        }
        hostLimitBytes = store.registeredBytes();
        hostLimitUntilNanos = System.nanoTime() + HOST_LIMIT_HOLD_NANOS;
        hostRefusal = e;
        hostRefusals++;
    }

    /** The cap now: the configured one, or lower while a refusal of the host stands. */
    private long effectiveCap() {
        if (hostRefusal != null && System.nanoTime() - hostLimitUntilNanos >= 0) {
            hostRefusal = null; // time to ask the host again
            hostLimitBytes = Long.MAX_VALUE;
        }
        return Math.min(options.maxRegisteredBytes(), hostLimitBytes);
    }

    /**
     * Whether {@code bytes} more can be registered, after taking back cached buffers and deregistering
     * idle chunks if needed.
     *
     * @throws BufferPoolException when under the host's limit no release could ever make room
     */
    boolean makeRoom(long bytes) {
        long cap = effectiveCap();
        if (store.registeredBytes() + bytes <= cap) {
            return true;
        }
        caches.drainAll(store);
        store.deregisterIdle(bytes, cap);
        if (store.registeredBytes() + bytes <= cap) {
            return true;
        }
        if (hostRefusal != null && (bytes > cap || inUseBytes() == 0)) {
            // Under the host's limit and nothing to wait for: no release can ever make room.
            throw new BufferPoolException(hostRefusal.getMessage(), hostRefusal.getCause(), true);
        }
        return false;
    }

    /**
     * Makes releases hand their buffers to the shared lists from now on. A thread that may wait calls
     * this before its last look at the thread caches, so a release that lands in a cache after that
     * look sees the waiter and hands the cache back.
     */
    boolean announceWaiter() {
        waiters++;
        return true;
    }

    /** Undoes {@link #announceWaiter} once the thread has its buffer or gives up. */
    void waiterLeft() {
        waiters--;
    }

    /** Whether some thread may be waiting; read without the lock by releases. */
    boolean hasWaiters() {
        return waiters != 0;
    }

    /** Wakes the waiters: memory was released or the pool closed. */
    void signalReleased() {
        released.signalAll();
    }

    /** Waits for a release until {@code deadline}; throws at the deadline. */
    boolean awaitRelease(long deadline, long wantedBytes, boolean waitedBefore) {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
            timeouts++;
            long registeredBytes = store.registeredBytes();
            if (hostRefusal != null) {
                throw new BufferPoolException("no receive memory after waiting " + options.acquireTimeoutMs()
                        + " ms: " + ByteSizes.format(wantedBytes) + " wanted, " + ByteSizes.format(registeredBytes)
                        + " registered, all in use, and the host refused more: " + hostRefusal.getMessage(),
                        hostRefusal.getCause(), true);
            }
            throw BufferPoolException.exhausted("buffer pool exhausted: " + ByteSizes.format(wantedBytes)
                    + " wanted, " + ByteSizes.format(registeredBytes) + " of the cap "
                    + ByteSizes.format(options.maxRegisteredBytes()) + " registered and "
                    + ByteSizes.format(inUseBytes()) + " in use after waiting "
                    + options.acquireTimeoutMs() + " ms; raise spark.shuffle.rdma.pool.maxRegisteredBytes or "
                    + "lower spark.shuffle.rdma.maxBytesInFlight");
        }
        if (!waitedBefore) {
            waits++;
        }
        try {
            released.awaitNanos(left);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new BufferPoolException("interrupted while waiting for a buffer", e);
        }
        return true;
    }

    /** Capacity of the buffers acquired and not released, not counting those found leaked. */
    long inUseBytes() {
        return caches.acquiredMinusReleasedBytes() - leaks.leakedBytes();
    }

    long waits() {
        return waits;
    }

    long timeouts() {
        return timeouts;
    }

    long hostRefusals() {
        return hostRefusals;
    }
}
