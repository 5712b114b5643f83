package org.rdmashuffle.transport.verbs;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A queue pair's destroy, done once: the first {@link #begin} caller destroys it and reports
 * {@link #done}; a later caller waits until then, up to a bound, so that whoever closes a queue pair and
 * then hands its READs' buffers back does not do so while another thread is still destroying it.
 * {@link #destroyed} completes when the destroy succeeded, never when it failed (the queue pair may be
 * alive: buffers it could write into must not go back to a pool).
 */
final class DestroyOnce {
    private final AtomicBoolean started = new AtomicBoolean();
    private final CompletableFuture<Void> destroyed = new CompletableFuture<>();

    /**
     * @return true for the first caller, who must destroy the queue pair and call {@link #done}; false for
     *     a later one, once the destroy is done or {@code waitMs} passed (or it was interrupted: the flag
     *     stays set)
     */
    boolean begin(long waitMs) {
        if (started.compareAndSet(false, true)) {
            return true;
        }
        try {
            destroyed.get(waitMs, TimeUnit.MILLISECONDS);
        } catch (TimeoutException | ExecutionException e) {
            // bounded: the caller goes on, and must still wait for destroyed() before handing buffers back
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return false;
    }

    /** Whether a destroy has begun. */
    boolean begun() {
        return started.get();
    }

    /** The first caller's destroy ended: {@code ok} when the queue pair is gone. */
    void done(boolean ok) {
        if (ok) {
            destroyed.complete(null);
        }
    }

    CompletableFuture<Void> destroyed() {
        return destroyed;
    }
}
