package org.rdmashuffle.transport;

import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;

/**
 * WARN lines about what peers do (limits hit, refused handshakes) at most once per interval, with a
 * count of the lines held back since the last one, so a hostile or broken peer cannot flood the log.
 * One instance per thread that logs (not thread-safe).
 */
public final class RateLimitedLog {
    private final Logger log;
    private final long intervalNanos;
    private long lastNanos;
    private boolean logged;
    private long suppressed;

    public RateLimitedLog(Logger log, long intervalMs) {
        this.log = log;
        this.intervalNanos = TimeUnit.MILLISECONDS.toNanos(intervalMs);
    }

    /** Logs at WARN unless a line went out less than the interval ago (then only counts it). */
    public void warn(String format, Object... args) {
        long now = System.nanoTime();
        if (logged && now - lastNanos < intervalNanos) {
            suppressed++;
            return;
        }
        if (suppressed > 0) {
            log.warn("({} similar lines held back in the last {} s)", suppressed,
                    TimeUnit.NANOSECONDS.toSeconds(now - lastNanos));
            suppressed = 0;
        }
        logged = true;
        lastNanos = now;
        log.warn(format, args);
    }

    /** Lines held back since the last one logged. */
    public long suppressed() {
        return suppressed;
    }
}
