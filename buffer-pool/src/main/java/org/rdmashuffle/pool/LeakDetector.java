package org.rdmashuffle.pool;

import java.lang.ref.Reference;
import java.lang.ref.ReferenceQueue;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import org.rdmashuffle.conf.RdmaShuffleConf.LeakDetection;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Finds buffers dropped without release. A tracked buffer is followed by a {@link LeakTracker}
 * (phantom reference) and is otherwise reachable only from its holders: the pool keeps no strong
 * reference to a buffer in use, so a dropped one is found by the garbage collector, reported with
 * where it was acquired (paranoid) or its last {@link RegisteredBuffer#touch hint}, and its memory
 * taken back. Paranoid tracks every acquire, sampled one in {@value #SAMPLE_ONE_IN}, disabled none.
 */
final class LeakDetector {
    private static final Logger LOG = LoggerFactory.getLogger(BufferPool.class); // the pool's log, as operators know it
    static final int SAMPLE_ONE_IN = 128;

    private final LeakDetection mode;
    private final ReferenceQueue<RegisteredBuffer> queue = new ReferenceQueue<>();
    private final Set<LeakTracker> trackers = ConcurrentHashMap.newKeySet();

    // Guarded by the pool lock.
    private long leaksDetected;
    private long leakedBytes;

    LeakDetector(LeakDetection mode) {
        this.mode = mode;
    }

    /** Starts following {@code b}, just acquired, if this acquire is to be tracked. */
    void onAcquire(RegisteredBuffer b) {
        if (mode == LeakDetection.DISABLED) {
            return;
        }
        boolean paranoid = mode == LeakDetection.PARANOID;
        if (!paranoid && ThreadLocalRandom.current().nextInt(SAMPLE_ONE_IN) != 0) {
            return;
        }
        LeakTracker t = new LeakTracker(b, queue, paranoid ? new Throwable("acquired here") : null);
        trackers.add(t);
        b.tracker = t;
    }

    /** Stops following {@code b}, released by its last holder. */
    void onRelease(RegisteredBuffer b) {
        LeakTracker t = b.tracker;
        if (t != null) {
            b.tracker = null;
            trackers.remove(t);
            t.clear();
        }
    }

    /**
     * Reports each tracked buffer the garbage collector found dropped and gives its memory back to
     * {@code store}. Called with the pool lock held.
     *
     * @return how many were found by this call
     */
    int poll(ChunkStore store) {
        int found = 0;
        Reference<? extends RegisteredBuffer> ref;
        while ((ref = queue.poll()) != null) {
            LeakTracker t = (LeakTracker) ref;
            if (!trackers.remove(t)) {
                continue;
            }
            found++;
            leaksDetected++;
            leakedBytes += t.capacity;
            LOG.error("LEAK: a registered buffer of {} bytes was dropped without release (last hint: {}); "
                    + "its memory is taken back", t.capacity, t.hint, t.acquiredAt);
            store.takeBackLeaked(t);
        }
        return found;
    }

    long leaksDetected() {
        return leaksDetected;
    }

    long leakedBytes() {
        return leakedBytes;
    }
}
