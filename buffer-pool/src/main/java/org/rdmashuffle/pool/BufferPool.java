package org.rdmashuffle.pool;

import java.io.IOException;
import java.lang.ref.PhantomReference;
import java.lang.ref.Reference;
import java.lang.ref.ReferenceQueue;
import java.lang.ref.WeakReference;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import org.rdmashuffle.conf.ByteSizes;
import org.rdmashuffle.conf.PreallocationSpec;
import org.rdmashuffle.conf.RdmaShuffleConf.LeakDetection;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A pool of registered direct memory. Memory is registered through a {@link Registrar} in chunks of
 * {@code chunkBytes}; each chunk serves one power-of-two size class and is cut into buffers of that
 * size. Requests above the largest class get a registration of their own, released on return; a
 * request above the cap itself fails at once, without taking back or deregistering anything.
 *
 * <p>Acquire and release touch only the calling thread's cache when it can serve them (no shared
 * lock, no allocation). Otherwise the shared free lists are used under one lock; new chunks are
 * registered while the registered bytes stay under the cap; before registering, the caches of
 * threads that have ended are taken back. At the cap the pool first takes back what thread caches
 * hold and deregisters empty chunks of other classes, then waits up to {@code acquireTimeoutMs} for a
 * release, then fails with {@link BufferPoolException}. A thread that may wait announces itself
 * before it takes back the caches, and a release into a thread cache that sees a waiter hands that
 * cache back, so no buffer sits in a cache while a waiter sleeps.
 *
 * <p>Thread-safe. Leak tracking (sampled or paranoid) keeps in-use buffers reachable only from their
 * holders, so a dropped buffer is found by the garbage collector, reported with where it was
 * acquired, and its memory taken back.
 */
public final class BufferPool implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(BufferPool.class);
    private static final int SAMPLE_ONE_IN = 128;

    private final Registrar registrar;
    private final BufferPoolOptions options;
    private final int minShift;
    private final int classCount;
    private final int cacheLimit;

    private final ReentrantLock lock = new ReentrantLock();
    private final Condition released = lock.newCondition();
    private final FreeStack[] free;
    private final List<Chunk> chunks = new ArrayList<>();
    private final Set<Chunk> largeChunks = ConcurrentHashMap.newKeySet();
    private final List<ThreadCache> caches = new CopyOnWriteArrayList<>();
    private final ThreadLocal<ThreadCache> cache;
    private final ReferenceQueue<RegisteredBuffer> leakQueue = new ReferenceQueue<>();
    private final Set<LeakTracker> trackers = ConcurrentHashMap.newKeySet();
    private volatile int waiters;
    private volatile boolean closed;

    // Guarded by lock.
    /** Counters of ended threads' caches, kept so that the totals still add up. */
    private long retiredAcquires;
    private long retiredReleases;
    private long retiredHits;
    private long retiredAcquiredBytes;
    private long retiredReleasedBytes;
    private long registeredBytes;
    /**
     * What the host let the pool register when it last refused more (allocation or registration
     * failed), used as the cap until {@link #hostLimitUntilNanos}; then the pool tries again.
     */
    private long hostLimitBytes = Long.MAX_VALUE;
    private long hostLimitUntilNanos;
    private BufferPoolException hostRefusal;
    /** How long a refusal of the host stands before the pool asks for more memory again. */
    static final long HOST_LIMIT_HOLD_NANOS = TimeUnit.SECONDS.toNanos(10);
    private long registrations;
    private long deregistrations;
    private long sharedHits;
    private long misses;
    private long waits;
    private long timeouts;
    private long hostRefusals;
    private long leaksDetected;
    private long leakedBytes;

    public BufferPool(BufferPoolOptions options, Registrar registrar) {
        this.options = options;
        this.registrar = registrar;
        this.minShift = Integer.numberOfTrailingZeros(options.minBufferBytes());
        this.classCount = Integer.numberOfTrailingZeros(options.maxBufferBytes()) - minShift + 1;
        this.cacheLimit = options.threadCacheBuffers();
        this.free = new FreeStack[classCount];
        for (int i = 0; i < classCount; i++) {
            free[i] = new FreeStack();
        }
        this.cache = ThreadLocal.withInitial(() -> {
            ThreadCache c = new ThreadCache(Thread.currentThread(), classCount, cacheLimit);
            caches.add(c);
            return c;
        });
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
                int cls = sizeClassOf(Math.toIntExact(e.sizeBytes()));
                long perChunk = options.chunkBytes() / e.sizeBytes();
                long chunksNeeded = (e.count() + perChunk - 1) / perChunk;
                for (long i = 0; i < chunksNeeded; i++) {
                    if (registeredBytes + options.chunkBytes() > options.maxRegisteredBytes()) {
                        throw new BufferPoolException("pre-allocation " + spec + " exceeds the cap of "
                                + ByteSizes.format(options.maxRegisteredBytes()) + " registered bytes");
                    }
                    registerChunk(cls);
                }
            }
        } finally {
            lock.unlock();
        }
        if (!spec.entries().isEmpty()) {
            LOG.info("buffer pool pre-allocated {} ({} registered)", spec, ByteSizes.format(registeredBytes));
        }
    }

    /**
     * The bytes an acquire of {@code sizeBytes} takes from the pool: its size class (a power of two, at
     * least the smallest buffer), or the size itself above the largest class. Callers that budget memory
     * charge this, not what they asked for.
     */
    public int bytesTaken(int sizeBytes) {
        if (sizeBytes <= 0) {
            throw new IllegalArgumentException("buffer size must be positive: " + sizeBytes);
        }
        return sizeBytes > options.maxBufferBytes() ? sizeBytes : classBytes(sizeClassOf(sizeBytes));
    }

    /** Size class index for a request of {@code size} bytes ({@code size <= maxBufferBytes}). */
    private int sizeClassOf(int size) {
        int shift = 32 - Integer.numberOfLeadingZeros(size - 1);
        return Math.max(0, shift - minShift);
    }

    private int classBytes(int cls) {
        return 1 << (cls + minShift);
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
        if (sizeBytes <= 0) {
            throw new IllegalArgumentException("buffer size must be positive: " + sizeBytes);
        }
        if (closed) {
            throw new BufferPoolException("buffer pool is closed");
        }
        ThreadCache tc = cache.get();
        RegisteredBuffer b;
        if (sizeBytes > options.maxBufferBytes()) {
            if (sizeBytes > options.maxRegisteredBytes()) {
                // Nothing reclaimed or waited for could ever make room: fail before touching anyone's cache.
                throw new BufferPoolException("a buffer of " + ByteSizes.format(sizeBytes) + " exceeds the cap of "
                        + ByteSizes.format(options.maxRegisteredBytes()) + " registered bytes "
                        + "(spark.shuffle.rdma.pool.maxRegisteredBytes)");
            }
            b = acquireLarge(sizeBytes, mayWait);
        } else {
            int cls = sizeClassOf(sizeBytes);
            b = tc.pop(cls);
            if (b == null) {
                b = acquireShared(cls, mayWait);
            }
        }
        if (b == null) {
            return null;
        }
        b.onAcquire();
        tc.countAcquire(b.capacity());
        if (options.leakDetection() != LeakDetection.DISABLED) {
            maybeTrack(b);
        }
        return b;
    }

    private RegisteredBuffer acquireShared(int cls, boolean mayWait) {
        lock.lock();
        try {
            RegisteredBuffer b = free[cls].pop();
            if (b != null) {
                sharedHits++;
                b.chunk.outstanding++;
                return b;
            }
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(options.acquireTimeoutMs());
            boolean announced = false;
            boolean waited = false;
            try {
                for (;;) {
                    ensureOpen();
                    pollLeaks();
                    b = free[cls].pop();
                    if (b == null && reclaimEndedThreadCaches()) {
                        b = free[cls].pop();
                    }
                    if (b != null) {
                        sharedHits++;
                        b.chunk.outstanding++;
                        return b;
                    }
                    if (makeRoom(options.chunkBytes())) {
                        try {
                            registerChunk(cls);
                        } catch (BufferPoolException e) {
                            hostRefused(e);
                            continue; // the host's limit is the cap now: reclaim, wait or give up as at the cap
                        }
                        misses++;
                        b = free[cls].pop();
                        b.chunk.outstanding++;
                        return b;
                    }
                    if (!mayWait) {
                        return null;
                    }
                    if (!announced) {
                        announced = announceWaiter(); // then look once more before sleeping
                        continue;
                    }
                    waited = awaitRelease(deadline, classBytes(cls), waited);
                }
            } finally {
                if (announced) {
                    waiters--;
                }
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * Makes releases hand their buffers to the shared lists from now on. A thread that may wait calls
     * this before its last look at the thread caches, so a release that lands in a cache after that
     * look sees the waiter and hands the cache back. Called with the lock held.
     */
    private boolean announceWaiter() {
        waiters++;
        return true;
    }

    private RegisteredBuffer acquireLarge(int sizeBytes, boolean mayWait) {
        lock.lock();
        try {
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(options.acquireTimeoutMs());
            boolean announced = false;
            boolean waited = false;
            try {
                for (;;) {
                    ensureOpen();
                    pollLeaks();
                    if (makeRoom(sizeBytes)) {
                        Chunk c;
                        try {
                            c = newChunk(-1, sizeBytes);
                        } catch (BufferPoolException e) {
                            hostRefused(e);
                            continue;
                        }
                        misses++;
                        largeChunks.add(c);
                        RegisteredBuffer b = new RegisteredBuffer(this, c, -1, 0, sizeBytes);
                        c.outstanding = 1;
                        return b;
                    }
                    if (!mayWait) {
                        return null;
                    }
                    if (!announced) {
                        announced = announceWaiter();
                        continue;
                    }
                    waited = awaitRelease(deadline, sizeBytes, waited);
                }
            } finally {
                if (announced) {
                    waiters--;
                }
            }
        } finally {
            lock.unlock();
        }
    }

    private void ensureOpen() {
        if (closed) {
            throw new BufferPoolException("buffer pool is closed");
        }
    }

    /** Notes that the host refused more memory: what is registered now is the cap for a while. */
    private void hostRefused(BufferPoolException e) {
        if (!e.memoryUnavailable()) {
            throw e;
        }
        hostLimitBytes = registeredBytes;
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

    /** Waits for a release until {@code deadline}; throws at the deadline. Called with the lock held. */
    private boolean awaitRelease(long deadline, long wantedBytes, boolean waitedBefore) {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
            timeouts++;
            if (hostRefusal != null) {
                throw new BufferPoolException("no receive memory after waiting " + options.acquireTimeoutMs()
                        + " ms: " + ByteSizes.format(wantedBytes) + " wanted, " + ByteSizes.format(registeredBytes)
                        + " registered, all in use, and the host refused more: " + hostRefusal.getMessage(),
                        hostRefusal.getCause(), true);
            }
            throw BufferPoolException.exhausted("buffer pool exhausted: " + ByteSizes.format(wantedBytes)
                    + " wanted, " + ByteSizes.format(registeredBytes) + " of the cap "
                    + ByteSizes.format(options.maxRegisteredBytes()) + " registered and "
                    + ByteSizes.format(inUseBytesLocked()) + " in use after waiting "
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

    /**
     * Whether {@code bytes} more can be registered, after taking back cached buffers and deregistering
     * empty chunks if needed. Called with the lock held.
     */
    private boolean makeRoom(long bytes) {
        long cap = effectiveCap();
        if (registeredBytes + bytes <= cap) {
            return true;
        }
        drainThreadCaches();
        for (int i = chunks.size() - 1; i >= 0 && registeredBytes + bytes > cap; i--) {
            Chunk c = chunks.get(i);
            if (c.outstanding == 0) {
                free[c.sizeClass].removeChunk(c);
                chunks.remove(i);
                deregister(c);
            }
        }
        if (registeredBytes + bytes <= cap) {
            return true;
        }
        if (hostRefusal != null && (bytes > cap || inUseBytesLocked() == 0)) {
            // Under the host's limit and nothing to wait for: no release can ever make room.
            throw new BufferPoolException(hostRefusal.getMessage(), hostRefusal.getCause(), true);
        }
        return false;
    }

    private void drainThreadCaches() {
        reclaimEndedThreadCaches();
        for (ThreadCache tc : caches) {
            tc.drainTo(this);
        }
    }

    /**
     * Takes back the caches of threads that have ended: their buffers go to the shared lists and their
     * counters into the pool's. Called with the lock held, off the hot path.
     *
     * @return whether any buffer came back
     */
    private boolean reclaimEndedThreadCaches() {
        boolean any = false;
        for (ThreadCache tc : caches) {
            if (tc.ownerAlive()) {
                continue;
            }
            synchronized (tc) {
                any |= tc.drainTo(this);
                retiredAcquires += tc.acquires;
                retiredReleases += tc.releases;
                retiredHits += tc.hits;
                retiredAcquiredBytes += tc.acquiredBytes;
                retiredReleasedBytes += tc.releasedBytes;
            }
            caches.remove(tc);
        }
        return any;
    }

    private void registerChunk(int cls) {
        Chunk c = newChunk(cls, options.chunkBytes());
        int size = classBytes(cls);
        for (int off = options.chunkBytes() - size; off >= 0; off -= size) {
            free[cls].push(new RegisteredBuffer(this, c, cls, off, size));
        }
        chunks.add(c);
    }

    private Chunk newChunk(int cls, int bytes) {
        ByteBuffer memory;
        try {
            memory = DirectMemory.allocateUnzeroed(bytes); // not zeroed: every READ writes what is then read
        } catch (OutOfMemoryError e) {
            // The error's message, not the error: Spark kills an executor whose task failure has an
            // OutOfMemoryError anywhere in its cause chain, and this one is the pool's to handle.
            throw new BufferPoolException("cannot allocate " + ByteSizes.format(bytes) + " of direct memory ("
                    + e.getMessage() + "; raise -XX:MaxDirectMemorySize)", null, true);
        }
        Registration reg;
        try {
            reg = registrar.register(memory);
        } catch (IOException e) { // the host's or device's limits: see Registrar
            DirectMemory.free(memory);
            throw new BufferPoolException("cannot register " + ByteSizes.format(bytes) + ": " + e.getMessage(), e, true);
        } catch (RuntimeException e) {
            DirectMemory.free(memory);
            throw new BufferPoolException("cannot register " + ByteSizes.format(bytes) + ": " + e.getMessage(), e);
        }
        registrations++;
        registeredBytes += bytes;
        return new Chunk(memory, reg, cls);
    }

    private void deregister(Chunk c) {
        if (c.deregistered) {
            return;
        }
        c.deregistered = true;
        if (c.sizeClass < 0) {
            largeChunks.remove(c);
        }
        registeredBytes -= c.memory.capacity();
        deregistrations++;
        try {
            c.registration.close();
        } catch (RuntimeException e) {
            LOG.warn("deregistering a {} chunk failed", ByteSizes.format(c.memory.capacity()), e);
        }
    }

    /** Called by {@link RegisteredBuffer#release()} when the count reaches zero. */
    void recycle(RegisteredBuffer b) {
        LeakTracker t = b.tracker;
        if (t != null) {
            b.tracker = null;
            trackers.remove(t);
            t.clear();
        }
        ThreadCache tc = cache.get();
        tc.countRelease(b.capacity());
        if (b.sizeClass < 0) {
            lock.lock();
            try {
                deregister(b.chunk);
                released.signalAll();
            } finally {
                lock.unlock();
            }
            return;
        }
        // A thread that never acquires (a transport thread returning the buffer of a READ that landed after
        // its fetcher closed) would park the buffer in a cache nobody takes from: it goes to the shared lists.
        if (waiters == 0 && !closed && tc.acquires > 0 && tc.push(b)) {
            if (waiters != 0) {
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
            tc.drainTo(this);
            released.signalAll();
        } finally {
            lock.unlock();
        }
    }

    private void returnShared(RegisteredBuffer b) {
        lock.lock();
        try {
            returnSharedLocked(b);
            if (waiters > 0) {
                released.signalAll();
            }
        } finally {
            lock.unlock();
        }
    }

    void returnSharedLocked(RegisteredBuffer b) {
        b.chunk.outstanding--;
        if (closed) {
            return;
        }
        free[b.sizeClass].push(b);
    }

    private void maybeTrack(RegisteredBuffer b) {
        boolean paranoid = options.leakDetection() == LeakDetection.PARANOID;
        if (!paranoid && ThreadLocalRandom.current().nextInt(SAMPLE_ONE_IN) != 0) {
            return;
        }
        LeakTracker t = new LeakTracker(b, leakQueue, paranoid ? new Throwable("acquired here") : null);
        trackers.add(t);
        b.tracker = t;
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

    private int pollLeaks() {
        int found = 0;
        Reference<? extends RegisteredBuffer> ref;
        while ((ref = leakQueue.poll()) != null) {
            LeakTracker t = (LeakTracker) ref;
            if (!trackers.remove(t)) {
                continue;
            }
            found++;
            leaksDetected++;
            leakedBytes += t.capacity;
            LOG.error("LEAK: a registered buffer of {} bytes was dropped without release (last hint: {}); "
                    + "its memory is taken back", t.capacity, t.hint, t.acquiredAt);
            if (t.sizeClass < 0) {
                deregister(t.chunk);
            } else {
                t.chunk.outstanding--;
                if (!closed) {
                    free[t.sizeClass].push(new RegisteredBuffer(this, t.chunk, t.sizeClass, t.chunkOffset, t.capacity));
                }
            }
            released.signalAll();
        }
        return found;
    }

    private long inUseBytesLocked() {
        long bytes = retiredAcquiredBytes - retiredReleasedBytes;
        for (ThreadCache tc : caches) {
            bytes += tc.acquiredBytes() - tc.releasedBytes();
        }
        return bytes - leakedBytes;
    }

    /** A consistent-enough snapshot of the counters (each thread's counters are read under its lock). */
    public BufferPoolStats stats() {
        lock.lock();
        try {
            pollLeaks();
            reclaimEndedThreadCaches();
            long acquires = retiredAcquires;
            long releases = retiredReleases;
            long cacheHits = retiredHits;
            long inUse = retiredAcquiredBytes - retiredReleasedBytes;
            for (ThreadCache tc : caches) {
                synchronized (tc) {
                    acquires += tc.acquires;
                    releases += tc.releases;
                    cacheHits += tc.hits;
                    inUse += tc.acquiredBytes - tc.releasedBytes;
                }
            }
            return new BufferPoolStats(registeredBytes, inUse - leakedBytes, acquires - releases - leaksDetected,
                    acquires, releases, cacheHits + sharedHits, cacheHits, misses, registrations, deregistrations,
                    waits, timeouts, leaksDetected, hostRefusals);
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
            long inUse = inUseBytesLocked();
            closed = true;
            drainThreadCaches();
            for (int i = chunks.size() - 1; i >= 0; i--) {
                deregister(chunks.get(i));
            }
            chunks.clear();
            for (FreeStack f : free) {
                f.clear();
            }
            for (Chunk c : new ArrayList<>(largeChunks)) {
                deregister(c);
            }
            if (inUse > 0) {
                LOG.warn("buffer pool closed with {} bytes still in use", inUse);
            }
            released.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /** A registered block of memory serving one size class ({@code sizeClass < 0}: one large buffer). */
    static final class Chunk {
        final ByteBuffer memory;
        final Registration registration;
        final int sizeClass;
        /** Buffers of this chunk outside the shared free list (in use or in a thread cache); guarded by lock. */
        int outstanding;
        /** Guarded by lock. */
        boolean deregistered;

        Chunk(ByteBuffer memory, Registration registration, int sizeClass) {
            this.memory = memory;
            this.registration = registration;
            this.sizeClass = sizeClass;
        }
    }

    /** An array stack of free buffers, guarded by the pool lock. */
    private static final class FreeStack {
        private RegisteredBuffer[] items = new RegisteredBuffer[64];
        private int size;

        void push(RegisteredBuffer b) {
            if (size == items.length) {
                RegisteredBuffer[] bigger = new RegisteredBuffer[size * 2];
                System.arraycopy(items, 0, bigger, 0, size);
                items = bigger;
            }
            items[size++] = b;
        }

        RegisteredBuffer pop() {
            if (size == 0) {
                return null;
            }
            RegisteredBuffer b = items[--size];
            items[size] = null;
            return b;
        }

        void removeChunk(Chunk c) {
            int w = 0;
            for (int r = 0; r < size; r++) {
                if (items[r].chunk != c) {
                    items[w++] = items[r];
                }
            }
            for (int i = w; i < size; i++) {
                items[i] = null;
            }
            size = w;
        }

        void clear() {
            for (int i = 0; i < size; i++) {
                items[i] = null;
            }
            size = 0;
        }
    }

    /**
     * One thread's cache and counters. Guarded by its own monitor (uncontended but for drains). Holds
     * its thread weakly, so the pool can tell when the thread has ended.
     */
    private static final class ThreadCache {
        private final WeakReference<Thread> owner;
        private final RegisteredBuffer[][] stacks;
        private final int[] counts;
        private final int limit;
        long acquires;
        long releases;
        long hits;
        long acquiredBytes;
        long releasedBytes;

        ThreadCache(Thread owner, int classes, int limit) {
            this.owner = new WeakReference<>(owner);
            this.limit = limit;
            this.stacks = new RegisteredBuffer[classes][limit];
            this.counts = new int[classes];
        }

        synchronized RegisteredBuffer pop(int cls) {
            int n = counts[cls];
            if (n == 0) {
                return null;
            }
            RegisteredBuffer b = stacks[cls][--n];
            stacks[cls][n] = null;
            counts[cls] = n;
            hits++;
            return b;
        }

        synchronized boolean push(RegisteredBuffer b) {
            int n = counts[b.sizeClass];
            if (n == limit) {
                return false;
            }
            stacks[b.sizeClass][n] = b;
            counts[b.sizeClass] = n + 1;
            return true;
        }

        synchronized void countAcquire(int bytes) {
            acquires++;
            acquiredBytes += bytes;
        }

        synchronized void countRelease(int bytes) {
            releases++;
            releasedBytes += bytes;
        }

        synchronized long acquiredBytes() {
            return acquiredBytes;
        }

        synchronized long releasedBytes() {
            return releasedBytes;
        }

        boolean ownerAlive() {
            Thread t = owner.get();
            return t != null && t.isAlive();
        }

        /** Moves every cached buffer to the shared lists; called with the pool lock held. */
        synchronized boolean drainTo(BufferPool pool) {
            boolean any = false;
            for (int cls = 0; cls < counts.length; cls++) {
                for (int i = 0; i < counts[cls]; i++) {
                    pool.returnSharedLocked(stacks[cls][i]);
                    stacks[cls][i] = null;
                    any = true;
                }
                counts[cls] = 0;
            }
            return any;
        }
    }

    /** Follows one in-use buffer; enqueued by the garbage collector if the buffer is dropped unreleased. */
    static final class LeakTracker extends PhantomReference<RegisteredBuffer> {
        final Chunk chunk;
        final int sizeClass;
        final int chunkOffset;
        final int capacity;
        final Throwable acquiredAt;
        volatile Object hint;

        LeakTracker(RegisteredBuffer b, ReferenceQueue<RegisteredBuffer> q, Throwable acquiredAt) {
            super(b, q);
            this.chunk = b.chunk;
            this.sizeClass = b.sizeClass;
            this.chunkOffset = b.registrationOffset();
            this.capacity = b.capacity();
            this.acquiredAt = acquiredAt;
        }
    }
}
