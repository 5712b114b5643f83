package org.rdmashuffle.pool;

import java.lang.ref.WeakReference;

/**
 * One thread's cache of free buffers (up to {@code limit} per size class) and its counters. Guarded
 * by its own monitor, uncontended but when the pool takes the cache back, so the owner's acquire and
 * release take no shared lock and allocate nothing. Holds its thread weakly, so the pool can tell when
 * the thread has ended.
 */
final class ThreadCache {
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

    /** Caches {@code b}; false when its class is full here. */
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

    boolean ownerAlive() {
        Thread t = owner.get();
        return t != null && t.isAlive();
    }

    /** Gives every cached buffer back to {@code store}; called with the pool lock held. */
    synchronized boolean drainTo(ChunkStore store) {
        boolean any = false;
        for (int cls = 0; cls < counts.length; cls++) {
            for (int i = 0; i < counts[cls]; i++) {
                store.giveBack(stacks[cls][i]);
                stacks[cls][i] = null;
                any = true;
            }
            counts[cls] = 0;
        }
        return any;
    }
}
