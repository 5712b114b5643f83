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
    /** Told when a destroy failed; null for none. */
    private final java.util.function.Consumer<String> onFailure;

    DestroyOnce() {
        this(null);
    }

    /**
     * @param onFailure told, with a reason, when the destroy failed: the queue pair may be alive and its READs'
     *     buffers are kept for good, so its node should stop (its executor then reads through the engine's
     *     own path rather than blaming peers for READs that never complete)
     */
    DestroyOnce(java.util.function.Consumer<String> onFailure) {
        this.onFailure = onFailure;
    }

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
        } else if (onFailure != null) {
            onFailure.accept("a queue pair could not be destroyed: the READs posted on it keep their buffers");
        }
    }

    CompletableFuture<Void> destroyed() {
        return destroyed;
    }
}
