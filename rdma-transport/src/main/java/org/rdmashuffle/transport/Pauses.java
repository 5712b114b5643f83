package org.rdmashuffle.transport;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Pauses of this JVM: stretches in which it did not run — a stop-the-world collection, a stopped process
 * (SIGSTOP, a debugger), a starved or migrating virtual machine. A peer cannot be heard by a reader that is not
 * running: replies sit in its socket or completion queue, requests posted just before sit unsent. So no request
 * timeout counts the time of a pause: it counts from the later of its own start and the end of this JVM's last
 * pause, and a reader that was paused never blames a healthy peer for its own silence.
 *
 * <p>A pause is seen by any thread that woke at least {@link #MIN_PAUSE_NANOS} later than it asked to
 * ({@link #observed}): the transports' timer threads every round, a task thread when its timed wait returns. The
 * record is the JVM's (a pause stops every thread of it), hence static. A thread merely late on a busy host may be
 * taken for a pause: that only lets a timeout count from later, never fails anything. Lock-free; allocates nothing
 * but the log line of a new pause.
 */
public final class Pauses {
    private static final Logger LOG = LoggerFactory.getLogger(Pauses.class);

    /** A thread that woke this much later than it asked to was paused. */
    public static final long MIN_PAUSE_NANOS = TimeUnit.MILLISECONDS.toNanos(500);

    /** When the last pause ended ({@link System#nanoTime}); "long ago" until one is seen. */
    private static final AtomicLong LAST_END = new AtomicLong(System.nanoTime() - (1L << 62));

    private Pauses() {
    }

    /**
     * A thread due to wake at {@code dueNanos} woke at {@code nowNanos}: when that is at least
     * {@link #MIN_PAUSE_NANOS} late, this JVM was paused until {@code nowNanos}.
     *
     * @return whether a pause was seen
     */
    public static boolean observed(long dueNanos, long nowNanos) {
        long late = nowNanos - dueNanos;
        if (late < MIN_PAUSE_NANOS) {
            return false;
        }
        for (;;) {
            long end = LAST_END.get();
            if (nowNanos - end <= 0) {
                return true; // a later end is recorded already
            }
            if (LAST_END.compareAndSet(end, nowNanos)) {
                if (nowNanos - end > late) { // not another thread's sight of the same pause
                    LOG.warn("this JVM did not run for about {} ms (a garbage collection, a stopped process or a "
                            + "starved host); request timeouts count from now, so no peer is blamed for it",
                            TimeUnit.NANOSECONDS.toMillis(late));
                }
                return true;
            }
        }
    }

    /** The later of {@code sinceNanos} and the end of this JVM's last pause: where a timeout counts from. */
    public static long countFrom(long sinceNanos) {
        long end = LAST_END.get();
        return end - sinceNanos > 0 ? end : sinceNanos;
    }

    /**
     * The rounds of one thread that wakes at least every {@code periodNanos} (a timer, a selector loop): a round
     * that comes {@link #MIN_PAUSE_NANOS} or more late saw a pause of this JVM. One thread only.
     */
    public static final class Rounds {
        private final long periodNanos;
        private long dueNanos;

        public Rounds(long periodNanos) {
            this.periodNanos = periodNanos;
            this.dueNanos = System.nanoTime() + periodNanos;
        }

        /** This round's time, {@link System#nanoTime}; a pause is recorded when the round came late. */
        public long next() {
            long now = System.nanoTime();
            observed(dueNanos, now);
            dueNanos = now + periodNanos;
            return now;
        }
    }

    /**
     * {@code future}'s value, waiting at most {@code timeoutMs} not counting this JVM's pauses: a wait that ends
     * while a pause ended after it began waits again, from the pause's end.
     *
     * @throws TimeoutException when nothing came within {@code timeoutMs} of running time
     */
    public static <T> T get(CompletableFuture<T> future, long timeoutMs)
            throws InterruptedException, ExecutionException, TimeoutException {
        long timeoutNanos = TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        long from = System.nanoTime();
        for (;;) {
            long due = from + timeoutNanos;
            try {
                return future.get(Math.max(0, due - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (TimeoutException e) {
                observed(due, System.nanoTime());
                long later = countFrom(from);
                if (later == from) {
                    throw e;
                }
                from = later;
            }
        }
    }
}
