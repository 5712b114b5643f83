package org.rdmashuffle.pool;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import org.rdmashuffle.conf.ByteSizes;
import org.rdmashuffle.conf.PreallocationSpec;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A pool of registered direct memory, handed out as reference-counted {@link RegisteredBuffer}s.
 * Thread-safe. What a caller can count on, and the part that keeps each rule:
 * <ul>
 * <li>A request is rounded up to a power-of-two size class ({@link #bytesTaken}; {@code SizeClasses}).
 *     Memory is registered through the {@link Registrar} in chunks of {@code chunkBytes}; each chunk
 *     serves one size class and is cut into buffers of that size. Requests above the largest class get
 *     a registration of their own, released on return ({@code ChunkStore}).
 * <li>Acquire and release touch only the calling thread's cache when it can serve them (no shared
 *     lock, no allocation: {@code ThreadCache}). Otherwise the shared free lists are used under the
 *     pool's one lock; new chunks are registered while the registered bytes stay under the cap; before
 *     registering, the caches of threads that have ended are taken back ({@code ThreadCaches}).
 * <li>At the cap the pool first takes back what thread caches hold and deregisters empty chunks of
 *     other classes, then {@link #acquire} waits up to {@code acquireTimeoutMs} for a release, then
 *     fails with {@link BufferPoolException}; {@link #tryAcquire} returns null instead of waiting. A
 *     thread that may wait announces itself before it takes back the caches, and a release into a
 *     thread cache that sees a waiter hands that cache back, so no buffer sits in a cache while a
 *     waiter sleeps ({@code RegistrationCap}; {@code recycle} here). A request above the cap itself fails
 *     at once, without taking back or deregistering anything (here, in {@link #acquire}).
 * <li>Leak tracking (sampled or paranoid) keeps in-use buffers reachable only from their holders, so
 *     a dropped buffer is found by the garbage collector, reported with where it was acquired, and its
 *     memory taken back ({@code LeakDetector}).
 * </ul>
 */
public final class BufferPool implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(BufferPool.class);

    private final BufferPoolOptions options;
    private final SizeClasses sizes;
    /** Guards the shared free lists, the chunks, the cap and every counter not in a thread cache. */
    private final ReentrantLock lock = new ReentrantLock();
    private final ChunkStore store;
    private final ThreadCaches caches;
    private final LeakDetector leaks;
    private final RegistrationCap cap;
    private volatile boolean closed;

    // Guarded by lock.
    private long sharedHits;
    private long misses;

    public BufferPool(BufferPoolOptions options, Registrar registrar) {
        this.options = options;
        this.sizes = new SizeClasses(options.minBufferBytes(), options.maxBufferBytes());
        this.store = new ChunkStore(this, registrar, sizes, options.chunkBytes());
        this.caches = new ThreadCaches(sizes.count(), options.threadCacheBuffers());
        this.leaks = new LeakDetector(options.leakDetection());
        this.cap = new RegistrationCap(options, lock, store, caches, leaks);
        try {
            preallocate(options.preallocate());
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    private void preallocate(PreallocationSpec spec) {
        lock.lock();
        try {
            for (PreallocationSpec.Entry e : spec.entries()) {
                int cls = sizes.of(Math.toIntExact(e.sizeBytes()));
                long perChunk = options.chunkBytes() / e.sizeBytes();
                long chunksNeeded = (e.count() + perChunk - 1) / perChunk;
                for (long i = 0; i < chunksNeeded; i++) {
                    if (store.registeredBytes() + options.chunkBytes() > options.maxRegisteredBytes()) {
                        throw new BufferPoolException("pre-allocation " + spec + " exceeds the cap of "
                                + ByteSizes.format(options.maxRegisteredBytes()) + " registered bytes");
                    }
                    store.registerChunk(cls);
                }
            }
        } finally {
            lock.unlock();
        }
        if (!spec.entries().isEmpty()) {
            LOG.info("buffer pool pre-allocated {} ({} registered)", spec, ByteSizes.format(store.registeredBytes()));
        }
    }

    /**
     * The bytes an acquire of {@code sizeBytes} takes from the pool: its size class (a power of two, at
     * least the smallest buffer), or the size itself above the largest class. Callers that budget memory
     * charge this, not what they asked for.
     */
    public int bytesTaken(int sizeBytes) {
        return sizes.bytesTaken(sizeBytes);
    }

    /**
     * Acquires a buffer of at least {@code sizeBytes} bytes, reference count 1.
     *
     * @throws BufferPoolException at the cap after the timeout, at once when {@code sizeBytes} exceeds
     *     the cap itself, on registration failure, or when closed
     */
    public RegisteredBuffer acquire(int sizeBytes) {
        return acquire(sizeBytes, true);
    }

    /**
     * Acquires a buffer as {@link #acquire} does, but never waits: at the cap, when nothing can be
     * taken back, it returns null. For threads that must not block (transport completions) and for
     * callers that have other work to do first.
     *
     * @throws BufferPoolException when {@code sizeBytes} exceeds the cap, on registration failure, or
     *     when closed
     */
    public RegisteredBuffer tryAcquire(int sizeBytes) {
        return acquire(sizeBytes, false);
    }

    private RegisteredBuffer acquire(int sizeBytes, boolean mayWait) {
        SizeClasses.checkPositive(sizeBytes);
        ensureOpen();
        ThreadCache tc = caches.get();
        RegisteredBuffer b;
        if (sizes.aboveLargest(sizeBytes)) {
            if (sizeBytes > options.maxRegisteredBytes()) {
                // Nothing reclaimed or waited for could ever make room: fail before touching anyone's cache.
                throw new BufferPoolException("a buffer of " + ByteSizes.format(sizeBytes) + " exceeds the cap of "
                        + ByteSizes.format(options.maxRegisteredBytes()) + " registered bytes "
                        + "(spark.shuffle.rdma.pool.maxRegisteredBytes)");
            }
            b = acquireShared(-1, sizeBytes, mayWait);
        } else {
            int cls = sizes.of(sizeBytes);
            b = tc.pop(cls);
            if (b == null) {
                b = acquireShared(cls, sizeBytes, mayWait);
            }
        }
        if (b == null) {
            return null;
        }
        b.onAcquire();
        tc.countAcquire(b.capacity());
        leaks.onAcquire(b);
        return b;
    }

    /**
     * An acquire the calling thread's cache could not serve: a buffer of class {@code cls} from the
     * shared list or a new chunk, or ({@code cls < 0}) a registration of its own for {@code sizeBytes}.
     * Before registering, the caches of ended threads are taken back; at the cap, {@link #cap} makes
     * room, or the caller waits (announced first) or gets null.
     */
    private RegisteredBuffer acquireShared(int cls, int sizeBytes, boolean mayWait) {
        lock.lock();
        try {
            RegisteredBuffer b;
            if (cls >= 0 && (b = store.pop(cls)) != null) {
                sharedHits++;
                return b;
            }
            long roomBytes = cls < 0 ? sizeBytes : options.chunkBytes();
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(options.acquireTimeoutMs());
            boolean announced = false;
            boolean waited = false;
            try {
                for (;;) {
                    ensureOpen();
                    pollLeaks();
                    if (cls >= 0) {
                        b = store.pop(cls);
                        if (b == null && caches.reclaimEnded(store)) {
                            b = store.pop(cls);
                        }
                        if (b != null) {
                            sharedHits++;
                            return b;
                        }
                    }
                    if (cap.makeRoom(roomBytes)) {
                        try {
                            b = cls < 0 ? store.registerLarge(sizeBytes) : registerChunkAndPop(cls);
                        } catch (BufferPoolException e) {
                            cap.hostRefused(e);
                            continue; // the host's limit is the cap now: reclaim, wait or give up as at the cap
                        }
                        misses++;
                        return b;
                    }
                    if (!mayWait) {
                        return null;
                    }
                    if (!announced) {
                        announced = cap.announceWaiter(); // then look once more before sleeping
                        continue;
                    }
                    waited = cap.awaitRelease(deadline, cls < 0 ? sizeBytes : sizes.bytes(cls), waited);
                }
            } finally {
                if (announced) {
                    cap.waiterLeft();
                }
            }
        } finally {
            lock.unlock();
        }
    }

    private RegisteredBuffer registerChunkAndPop(int cls) {
        store.registerChunk(cls);
        return store.pop(cls);
    }

    private void ensureOpen() {
        if (closed) {
            throw new BufferPoolException("buffer pool is closed");
        }
    }

    /**
     * Called by {@link RegisteredBuffer#release()} when the count reaches zero. A buffer above the
     * largest class is deregistered; one of a size class goes to this thread's cache unless someone
     * waits, the pool is closed, the cache is full, or this thread never acquires; then to the shared
     * list. A release into the cache that sees a waiter announced meanwhile hands the cache back.
     */
    void recycle(RegisteredBuffer b) {
        leaks.onRelease(b);
        ThreadCache tc = caches.get();
        tc.countRelease(b.capacity());
        if (b.sizeClass < 0) {
            lock.lock();
            try {
                store.deregister(b.chunk);
                cap.signalReleased();
            } finally {
                lock.unlock();
            }
            return;
        }
        // A thread that never acquires (a transport thread returning the buffer of a READ that landed after
        // its fetcher closed) would park the buffer in a cache nobody takes from: it goes to the shared lists.
        if (!cap.hasWaiters() && !closed && tc.acquires > 0 && tc.push(b)) {
            if (cap.hasWaiters()) {
                handBack(tc); // a waiter announced itself meanwhile and may have looked at this cache already
            }
            return;
        }
        returnShared(b);
    }

    /** Moves {@code tc}'s buffers to the shared lists and wakes the waiters. */
    private void handBack(ThreadCache tc) {
        lock.lock();
        try {
            tc.drainTo(store);
            cap.signalReleased();
        } finally {
            lock.unlock();
        }
    }

    private void returnShared(RegisteredBuffer b) {
        lock.lock();
        try {
            store.giveBack(b);
            if (cap.hasWaiters()) {
                cap.signalReleased();
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * Looks for tracked buffers the garbage collector found dropped without release, reports each and
     * takes its memory back.
     *
     * @return how many were found by this call
     */
    public int checkLeaks() {
        lock.lock();
        try {
            return pollLeaks();
        } finally {
            lock.unlock();
        }
    }

    /** {@link LeakDetector#poll} and wakes the waiters if memory came back. Called with the lock held. */
    private int pollLeaks() {
        int found = leaks.poll(store);
        if (found > 0) {
            cap.signalReleased();
        }
        return found;
    }

    /** A consistent-enough snapshot of the counters (each thread's counters are read under its lock). */
    public BufferPoolStats stats() {
        lock.lock();
        try {
            pollLeaks();
            caches.reclaimEnded(store);
            ThreadCaches.Totals t = caches.totals();
            return new BufferPoolStats(store.registeredBytes(), t.acquiredMinusReleasedBytes - leaks.leakedBytes(),
                    t.acquires - t.releases - leaks.leaksDetected(), t.acquires, t.releases, t.hits + sharedHits,
                    t.hits, misses, store.registrations(), store.deregistrations(), cap.waits(), cap.timeouts(),
                    leaks.leaksDetected(), cap.hostRefusals());
        } finally {
            lock.unlock();
        }
    }

    public BufferPoolOptions options() {
        return options;
    }

    /**
     * Deregisters every chunk. Buffers still in use are reported (they stay valid memory but are no
     * longer registered). Idempotent.
     */
    @Override
    public void close() {
        lock.lock();
        try {
            if (closed) {
                return;
            }
            pollLeaks();
            long inUse = cap.inUseBytes();
            closed = true;
            store.close();
            caches.drainAll(store); // cached buffers are only counted back now: their chunks are gone
            if (inUse > 0) {
                LOG.warn("buffer pool closed with {} bytes still in use", inUse);
            }
            cap.signalReleased();
        } finally {
            lock.unlock();
        }
    }
}
