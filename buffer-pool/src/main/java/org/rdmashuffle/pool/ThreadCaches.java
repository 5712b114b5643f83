package org.rdmashuffle.pool;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * Every thread's {@link ThreadCache}, and the counters of the threads that have ended, kept so that
 * the pool's totals still add up. Each thread gets its cache on its first acquire or release; the
 * methods other than {@link #get} are called with the pool lock held, off the hot path.
 */
final class ThreadCaches {
    private final List<ThreadCache> caches = new CopyOnWriteArrayList<>();
    private final ThreadLocal<ThreadCache> cache;
    private final Totals totals = new Totals();

    // Guarded by the pool lock.
    private long retiredAcquires;
    private long retiredReleases;
    private long retiredHits;
    private long retiredAcquiredBytes;
    private long retiredReleasedBytes;

    ThreadCaches(int classes, int limit) {
        this.cache = ThreadLocal.withInitial(() -> {
            ThreadCache c = new ThreadCache(Thread.currentThread(), classes, limit);
            caches.add(c);
            return c;
        });
    }

    /** The calling thread's cache. */
    ThreadCache get() {
        return cache.get();
    }

    /** Gives the buffers of every cache back to {@code store}, after taking back ended threads' caches. */
    void drainAll(ChunkStore store) {
        reclaimEnded(store);
        for (ThreadCache tc : caches) {
            tc.drainTo(store);
        }
    }

    /**
     * Takes back the caches of threads that have ended: their buffers go to {@code store} and their
     * counters into the retired ones.
     *
     * @return whether any buffer came back
     */
    boolean reclaimEnded(ChunkStore store) {
        boolean any = false;
        for (ThreadCache tc : caches) {
            if (tc.ownerAlive()) {
                continue;
            }
            synchronized (tc) {
                any |= tc.drainTo(store);
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

    /** Capacity acquired minus capacity released, over every thread that ever used the pool. */
    long acquiredMinusReleasedBytes() {
        return totals().acquiredMinusReleasedBytes;
    }

    /**
     * The counters summed over every thread, each thread's read under its monitor. The object returned
     * is reused by the next call.
     */
    Totals totals() {
        Totals t = totals;
        t.acquires = retiredAcquires;
        t.releases = retiredReleases;
        t.hits = retiredHits;
        t.acquiredMinusReleasedBytes = retiredAcquiredBytes - retiredReleasedBytes;
        for (ThreadCache tc : caches) {
            synchronized (tc) {
                t.acquires += tc.acquires;
                t.releases += tc.releases;
                t.hits += tc.hits;
                t.acquiredMinusReleasedBytes += tc.acquiredBytes - tc.releasedBytes;
            }
        }
        return t;
    }

    /** What {@link #totals} sums; guarded by the pool lock. */
    static final class Totals {
        long acquires;
        long releases;
        long hits;
        long acquiredMinusReleasedBytes;
    }
}
