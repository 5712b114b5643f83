package org.rdmashuffle.transport;

import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.LockSupport;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Pauses of this JVM: stretches in which it did not run — a stop-the-world collection, a stopped process
 * (SIGSTOP, a debugger), a frozen or migrating virtual machine. A peer cannot be heard by a reader that is not
 * running: replies wait in its socket or completion queue, a request posted just before waits unsent. So a request
 * timeout counts running time ({@link #pausedSince}): what a pause took after the timeout began is added to it, and
 * a reader that was paused does not blame a healthy peer for its own silence. Only pauses are added, measured: a
 * peer that stays silent while this JVM runs is timed out as before, however busy the reader's threads are.
 *
 * <p>A pause is found by the silence of a watcher thread that does nothing else: it looks every
 * {@link #WATCH_PERIOD_NANOS}, and when it last looked {@code WATCH_PERIOD_NANOS +} {@link #MIN_PAUSE_NANOS} ago or
 * more, it did not run meanwhile — nor, but for a host too starved to run it, did anything else of this JVM. Every
 * timeout check looks too before it decides ({@link #pausedSince}), and whichever thread looks first after the
 * silence records the pause before anyone can see that a look happened: no check decides on a pause not yet recorded.
 * A pause is found 0–200 ms short (the watcher may have been about to look when it began); one shorter than about
 * 700 ms may not be found, and counts as any delay does.
 *
 * <p>The watcher runs while a node of this JVM is open ({@link #watch()}, one lease per node; it starts on that
 * node's thread, with no context class loader and no inherited thread locals). Without it nothing is found, and
 * timeouts count all time. The record is the JVM's (a pause stops every thread of it), hence static: the last
 * {@link #KEPT} pauses ({@link Kept}); a short-lived thread writes the log line of each (never the watcher: a log
 * sink that blocks must not silence it). A check allocates nothing.
 */
public final class Pauses {
    private static final Logger LOG = LoggerFactory.getLogger(Pauses.class);

    /** The shortest silence of the watcher, beyond its period, that is taken for a pause. */
    public static final long MIN_PAUSE_NANOS = TimeUnit.MILLISECONDS.toNanos(500);
    /** How often the watcher looks. */
    static final long WATCH_PERIOD_NANOS = TimeUnit.MILLISECONDS.toNanos(200);
    /** Looks closer together than this change nothing (no lock for every timeout check). */
    private static final long LOOK_GRAIN_NANOS = TimeUnit.MILLISECONDS.toNanos(10);
    /** How many pauses are kept: a wait that began before the oldest of them counts only those. */
    static final int KEPT = 64;

    private static final Object LOCK = new Object();
    /** This JVM's pauses. */
    private static final Kept JVM = new Kept();
    /** When a thread last looked while the watcher ran; written under {@link #LOCK}, after any pause it found. */
    private static volatile long lastLook;
    /** Whether the watcher runs (a look then can find a pause); written under {@link #LOCK}. */
    private static volatile boolean watching;
    /** The open leases, and the watcher thread; under {@link #LOCK}. */
    private static int leases;
    private static Thread watcher;

    private Pauses() {
    }

    /** A lease on the watcher ({@link #watch()}); closing it twice is closing it once. */
    public interface Lease extends AutoCloseable {
        @Override
        void close();
    }

    /**
     * A lease on the watcher: it runs while one is open (a node holds one from open to close). The first starts it,
     * and so does any later one while it is not running (it could not start, or it died); when it cannot start (no
     * thread to be had), a WARN says so and timeouts count all time, as before.
     */
    public static Lease watch() {
        synchronized (LOCK) {
            leases++;
            if (watcher == null) {
                startWatcher();
            }
        }
        boolean[] closed = new boolean[1];
        return () -> {
            synchronized (LOCK) {
                if (closed[0]) {
                    return;
                }
                closed[0] = true;
                if (--leases == 0 && watcher != null) {
                    watching = false;
                    LockSupport.unpark(watcher);
                    watcher = null;
                }
            }
        };
    }

    /** The number of open leases (for tests). */
    static int leases() {
        synchronized (LOCK) {
            return leases;
        }
    }

    /** The watcher thread, or null when none runs (for tests). */
    static Thread watcher() {
        synchronized (LOCK) {
            return watcher;
        }
    }

    /** Under {@link #LOCK}. */
    private static void startWatcher() {
        lastLook = System.nanoTime(); // the time before was not watched: no pause in it
        Thread t = daemon(Pauses::watchLoop, "rdma-shuffle-pause-watch");
        try {
            t.start();
            watcher = t;
            watching = true;
        } catch (Throwable e) { // OutOfMemoryError: unable to create native thread
            LOG.warn("cannot start the pause watcher ({}): request timeouts count this JVM's pauses too",
                    String.valueOf(e));
        }
    }

    /** A daemon thread with no context class loader and no inherited thread locals (it pins nothing). */
    private static Thread daemon(Runnable r, String name) {
        Thread t = new Thread(null, r, name, 0, false);
        t.setDaemon(true);
        t.setContextClassLoader(null);
        return t;
    }

    /**
     * The watcher: parks, looks, and hands the log lines of new pauses to a thread of their own (a log sink that
     * blocks must not silence the watcher: its silence would be taken for a pause). When it ends for any reason,
     * it says so under the lock, and the next lease starts another.
     */
    private static void watchLoop() {
        Thread self = Thread.currentThread();
        int logged = JVM.count();
        Thread logging = null;
        try {
            while (isWatcher(self)) {
                try {
                    LockSupport.parkNanos(WATCH_PERIOD_NANOS);
                    Thread.interrupted(); // an interrupt must not turn the park into a spin
                    look();
                    int n = JVM.count();
                    if (n > logged && (logging == null || !logging.isAlive())) {
                        logging = logLater(logged, n);
                        logged = n;
                    }
                } catch (Throwable e) { // goes on: without it every timeout counts pauses again
                    logging = null;
                }
            }
        } finally {
            synchronized (LOCK) {
                if (watcher == self) {
                    watcher = null;
                    watching = false;
                }
            }
        }
    }

    private static boolean isWatcher(Thread t) {
        synchronized (LOCK) {
            return watcher == t;
        }
    }

    /** Starts a thread that logs pauses number {@code from} to {@code to} (exclusive), those still kept. */
    private static Thread logLater(int from, int to) {
        long[] lengths = new long[to - from];
        for (int i = from; i < to; i++) {
            lengths[i - from] = JVM.length(i);
        }
        Thread t = daemon(() -> {
            for (long l : lengths) {
                if (l > 0) {
                    LOG.warn("this JVM did not run for about {} ms (a garbage collection, a stopped process or a "
                            + "frozen host): request timeouts do not count it, so no peer is blamed for it",
                            TimeUnit.NANOSECONDS.toMillis(l));
                }
            }
        }, "rdma-shuffle-pause-log");
        t.start();
        return t;
    }

    /** Looks now: when the watcher was silent for a pause's length, this JVM was paused until now, recorded so. */
    static void look() {
        if (!watching || System.nanoTime() - lastLook < LOOK_GRAIN_NANOS) {
            return;
        }
        synchronized (LOCK) {
            long now = System.nanoTime();
            long last = lastLook;
            if (!watching || now - last < LOOK_GRAIN_NANOS) {
                return;
            }
            long silent = now - last - WATCH_PERIOD_NANOS; // the watcher may have been about to look
            if (silent >= MIN_PAUSE_NANOS) {
                JVM.add(now - silent, now);
            }
            lastLook = now; // after the pause is kept: whoever sees this look sees the pause
        }
    }

    /**
     * Records that this JVM did not run from {@code fromNanos} to {@code toNanos} (at most now): for a thread that
     * knows it did not run, and for tests. What the last recorded pause covers already is left out (all of it, for
     * a pause that ended before that one).
     */
    public static void record(long fromNanos, long toNanos) {
        synchronized (LOCK) {
            long now = System.nanoTime();
            JVM.add(fromNanos, toNanos - now > 0 ? now : toNanos);
        }
    }

    /**
     * How long this JVM was paused since {@code sinceNanos} ({@link System#nanoTime}), looking first: what a timeout
     * started then adds to its length. 0 when no pause is recorded since. Read the clock before calling it.
     */
    public static long pausedSince(long sinceNanos) {
        look();
        return JVM.since(sinceNanos);
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
            long now = System.nanoTime();
            long left = from + timeoutNanos + pausedSince(from) - now;
            if (left <= 0 && !future.isDone()) {
                throw new TimeoutException("nothing within " + timeoutMs + " ms of running time");
            }
            try {
                return future.get(Math.max(0, left), TimeUnit.NANOSECONDS);
            } catch (TimeoutException e) {
                // time left again once a pause meanwhile is counted out of it; else the next round throws
            }
        }
    }

    /** The last {@link #KEPT} pauses of a JVM, and how many were ever added. Thread-safe; reading allocates nothing. */
    static final class Kept {
        /** Oldest first: start, end, start, end, ... (an immutable snapshot). */
        private volatile long[] kept = new long[0];
        private volatile int count;

        /**
         * Adds the pause from {@code fromNanos} to {@code toNanos}, less what a recorded one covers already.
         *
         * @return how long the new stretch is (0: nothing new)
         */
        synchronized long add(long fromNanos, long toNanos) {
            long[] r = kept;
            long start = fromNanos;
            if (r.length > 0 && start - r[r.length - 1] < 0) {
                start = r[r.length - 1];
            }
            if (toNanos - start <= 0) {
                return 0;
            }
            int keep = Math.min(r.length, 2 * (KEPT - 1));
            long[] next = Arrays.copyOf(Arrays.copyOfRange(r, r.length - keep, r.length), keep + 2);
            next[keep] = start;
            next[keep + 1] = toNanos;
            kept = next;
            count++;
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

        /** How many pauses were ever added. */
        int count() {
            return count;
        }

        /** How long pause number {@code n} (counted from 0) is, or 0 when it is no longer kept. */
        synchronized long length(int n) {
            int back = count - 1 - n; // 0: the last one
            int at = kept.length - 2 - 2 * back;
            return back < 0 || at < 0 ? 0 : kept[at + 1] - kept[at];
        }
    }
}
