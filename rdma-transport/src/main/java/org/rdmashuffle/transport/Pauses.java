package org.rdmashuffle.transport;

import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Pauses of this JVM: stretches in which none of its threads ran — a stop-the-world collection, a stopped process
 * (SIGSTOP, a debugger), a frozen or migrating virtual machine. A peer cannot be heard by a reader that is not
 * running: replies wait in its socket or completion queue, a request posted just before waits unsent. So a request
 * timeout counts running time only ({@link #pausedSince}): the time of a pause is added to it, and a reader that
 * was paused never blames a healthy peer for its own silence. Only pauses are added, measured: a peer that stays
 * silent while this JVM runs is timed out as before, however busy the reader's threads are.
 *
 * <p>A pause is found by looking ({@link #look}) how long ago this JVM last looked: a watcher thread that does
 * nothing else looks every {@link #WATCH_PERIOD_NANOS}, and so does every timeout check before it decides; no look
 * for {@code WATCH_PERIOD_NANOS +} {@link #MIN_PAUSE_NANOS} means no thread of this JVM ran meanwhile (the watcher
 * would have). Whichever thread looks first after a pause records it, so a timeout check never decides on a pause
 * not yet recorded. The record is the JVM's (a pause stops every thread of it), hence static: the last
 * {@link #KEPT} pauses ({@link Kept}). Lock-free and allocation-free but for recording a pause (a log line, a
 * new snapshot).
 */
public final class Pauses {
    private static final Logger LOG = LoggerFactory.getLogger(Pauses.class);

    /** The shortest stretch without a look that is taken for a pause (beyond the watcher's period). */
    public static final long MIN_PAUSE_NANOS = TimeUnit.MILLISECONDS.toNanos(500);
    /** How often the watcher thread looks. */
    static final long WATCH_PERIOD_NANOS = TimeUnit.MILLISECONDS.toNanos(200);
    /** Looks closer together than this change nothing (no write for every timeout check). */
    private static final long LOOK_GRAIN_NANOS = TimeUnit.MILLISECONDS.toNanos(10);
    /** How many pauses are kept: a wait that began before the oldest of them counts those before it (conservative). */
    static final int KEPT = 16;

    /** When a thread of this JVM last looked. */
    private static final AtomicLong LAST_LOOK = new AtomicLong(System.nanoTime());
    /** This JVM's pauses. */
    private static final Kept JVM = new Kept();

    static {
        Thread watcher = new Thread(null, Pauses::watch, "rdma-shuffle-pause-watch", 0, false);
        watcher.setDaemon(true);
        watcher.start();
    }

    private Pauses() {
    }

    private static void watch() {
        for (;;) {
            LockSupport.parkNanos(WATCH_PERIOD_NANOS);
            look();
        }
    }

    /** Looks now: when no thread looked for a pause's length, this JVM was paused until now, and it is recorded. */
    static void look() {
        long now = System.nanoTime();
        for (;;) {
            long last = LAST_LOOK.get();
            if (now - last < LOOK_GRAIN_NANOS) {
                return;
            }
            if (LAST_LOOK.compareAndSet(last, now)) {
                long silent = now - last - WATCH_PERIOD_NANOS; // the watcher may have been about to look
                if (silent >= MIN_PAUSE_NANOS) {
                    record(now - silent, now);
                }
                return;
            }
        }
    }

    /**
     * Records that this JVM did not run from {@code fromNanos} to {@code toNanos} (a pause seen, or a test's), merged
     * with one recorded already that it overlaps: no stretch is counted twice.
     */
    public static void record(long fromNanos, long toNanos) {
        long added = JVM.add(fromNanos, toNanos);
        if (added > 0) {
            LOG.warn("this JVM did not run for about {} ms (a garbage collection, a stopped process or a frozen "
                    + "host): request timeouts do not count it, so no peer is blamed for it",
                    TimeUnit.NANOSECONDS.toMillis(added));
        }
    }

    /**
     * How long this JVM was paused since {@code sinceNanos} ({@link System#nanoTime}), looking first: what a timeout
     * started then adds to its length. 0 when no pause is recorded since.
     */
    public static long pausedSince(long sinceNanos) {
        look();
        return JVM.since(sinceNanos);
    }

    /** The last {@link #KEPT} pauses of a JVM. Thread-safe; reading allocates nothing. */
    static final class Kept {
        /** Oldest first: start, end, start, end, ... (an immutable snapshot). */
        private volatile long[] kept = new long[0];

        /**
         * Adds the pause from {@code fromNanos} to {@code toNanos}, less what a recorded one covers already.
         *
         * @return how long the new stretch is (0: nothing new)
         */
        synchronized long add(long fromNanos, long toNanos) {
            long[] r = kept;
            long start = fromNanos;
            if (r.length > 0) {
                long lastEnd = r[r.length - 1];
                if (start - lastEnd < 0) {
                    start = lastEnd;
                }
            }
            if (toNanos - start <= 0) {
                return 0;
            }
            int keep = Math.min(r.length, 2 * (KEPT - 1));
            long[] next = Arrays.copyOf(Arrays.copyOfRange(r, r.length - keep, r.length), keep + 2);
            next[keep] = start;
            next[keep + 1] = toNanos;
            kept = next;
            return toNanos - start;
        }

        /** How much of the kept pauses lies after {@code sinceNanos}. */
        long since(long sinceNanos) {
            long[] r = kept;
            long paused = 0;
            for (int i = r.length - 2; i >= 0; i -= 2) {
                long end = r[i + 1];
                if (end - sinceNanos <= 0) {
                    break; // older ones ended before it too
                }
                long start = r[i];
                paused += end - (start - sinceNanos < 0 ? sinceNanos : start);
            }
            return paused;
        }
    }

    /**
     * {@code future}'s value, waiting at most {@code timeoutMs} of this JVM's running time (its pauses meanwhile
     * not counted).
     *
     * @throws TimeoutException when nothing came within {@code timeoutMs} of running time
     */
    public static <T> T get(CompletableFuture<T> future, long timeoutMs)
            throws InterruptedException, ExecutionException, TimeoutException {
        long timeoutNanos = TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        long from = System.nanoTime();
        for (;;) {
            long left = from + timeoutNanos + pausedSince(from) - System.nanoTime();
            try {
                return future.get(Math.max(0, left), TimeUnit.NANOSECONDS);
            } catch (TimeoutException e) {
                if (from + timeoutNanos + pausedSince(from) - System.nanoTime() <= 0) {
                    throw e;
                }
            }
        }
    }
}
