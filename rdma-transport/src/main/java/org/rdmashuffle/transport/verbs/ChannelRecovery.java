package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.ReadStatus;

/**
 * What a {@link VerbsChannel} does when its queue pair fails or its READs stop moving: sets the READ
 * that failed the queue pair aside and asks the peer about it (completing it with the peer's reason
 * when it was invalid, posting it again when it was valid), posts the flushed READs again on a fresh
 * queue pair, and fails the channel when a READ outstands past the request timeout or the peer cannot
 * be asked or reached. Also sends the channel's keep-alives. Works on the channel's state under its
 * lock; one per channel.
 */
final class ChannelRecovery {
    /** A READ flushed by another READ's error is posted again at most this many times. */
    static final int MAX_REPOSTS = 2;

    private final VerbsChannel ch;
    private final long requestTimeoutNanos;
    private final long stallNanos;
    // Guarded by the channel's lock.
    private boolean stallCheckRunning;
    private int keepAlivesUnanswered;

    ChannelRecovery(VerbsChannel ch, long requestTimeoutNanos, long stallNanos) {
        this.ch = ch;
        this.requestTimeoutNanos = requestTimeoutNanos;
        this.stallNanos = stallNanos;
    }

    /**
     * The queue pair failed. The READ that failed it (the given slot, else the oldest outstanding) is
     * set aside to be diagnosed; every other outstanding READ was flushed and goes back to the head of
     * the queue, oldest first, to be posted again on a fresh queue pair. The failed queue pair may still
     * write into their buffers (a stalled or disconnected one is not in the error state) and may still
     * complete into the completion queue: READs given up are delivered, and its completion room given
     * back, only once it is destroyed ({@link #retire}). Lock held, state OPEN.
     */
    void start(int suspectSlot, String cause) {
        ReadWindow window = ch.window;
        if (suspectSlot < 0) {
            suspectSlot = window.oldestBusy();
        }
        ReadTable suspect = null;
        int room = 0;
        if (suspectSlot >= 0) {
            suspect = new ReadTable(1);
            suspect.copy(window.slots, suspectSlot, 0);
            window.release(suspectSlot);
            room++;
        }
        Deliveries givenUp = new Deliveries();
        int outstanding = window.requeueInPostOrder(ch.queue, givenUp, MAX_REPOSTS);
        room += outstanding;
        QueuePair old = ch.endpoint;
        ch.endpointTag = WorkRequestIds.NO_TAG;
        if (suspect == null && ch.queue.isEmpty()) {
            // nothing to save: the channel fails (destroying the queue pair); the next connect makes a new one
            ch.pendingRoom += room;
            ch.state = VerbsChannel.FAILING;
            deliverOnceDestroyed(givenUp, ReadStatus.CONNECTION_LOST, old, null);
            ch.failLater(ReadStatus.CONNECTION_LOST, cause + " while idle");
            return;
        }
        ch.state = VerbsChannel.RECOVERING;
        ch.endpoint = null;
        if (old != null) {
            old.channel(null);
            ch.retiring = old;
            retire(old, room);
        } else {
            ch.node.returnCompletionRoom(room);
        }
        deliverOnceDestroyed(givenUp, ReadStatus.CONNECTION_LOST, old, null);
        VerbsChannel.LOG.info("queue pair to {} failed ({}); {} READs will be posted again on a new one{}", ch.peer,
                cause, outstanding - givenUp.size(), suspect == null ? "" : " after the peer says whether READ "
                        + suspect.describe(0) + " was valid");
        ReadTable s = suspect;
        ch.node.execute(() -> recover(old, s, cause));
    }

    /**
     * {@code qp} was taken out of service with {@code room} READs' completion room: the room goes back once
     * it is destroyed (nothing more can complete) and the completions it left in the queue are polled.
     * Until then its flushed completions may still fill the queue, and reusing the room would overrun it.
     */
    void retire(QueuePair qp, int room) {
        if (room <= 0) {
            return;
        }
        VerbsNode node = ch.node;
        qp.destroyed().whenComplete((v, e) -> node.afterCompletionsPolled(() -> node.returnCompletionRoom(room)));
    }

    /**
     * Completes {@code d}'s READs with {@code status} once {@code a} and {@code b} (either may be null) are
     * destroyed: their buffers go back to a pool then, never while a queue pair that could write into them
     * is alive. At once when they are; else on a worker when the last destroy finishes.
     */
    void deliverOnceDestroyed(Deliveries d, int status, QueuePair a, QueuePair b) {
        if (d.size() == 0) {
            return;
        }
        Runnable all = () -> {
            for (int i = 0; i < d.size(); i++) {
                ch.node.countRead(status, 0);
                ch.deliver(d.listeners.get(i), d.ids.get(i), status, 0);
            }
        };
        CompletableFuture<Void> da = a == null ? CompletableFuture.completedFuture(null) : a.destroyed();
        CompletableFuture<Void> db = b == null ? CompletableFuture.completedFuture(null) : b.destroyed();
        if (da.isDone() && db.isDone()) {
            all.run();
            return;
        }
        CompletableFuture.allOf(da, db).whenComplete((v, e) -> ch.node.execute(all));
    }

    /** Waits, within {@link QueuePair#CLOSE_WAIT_MS}, for {@code qp} to be destroyed; true when it is. */
    private static boolean awaitDestroyed(QueuePair qp) {
        try {
            qp.destroyed().get(QueuePair.CLOSE_WAIT_MS, TimeUnit.MILLISECONDS);
            return true;
        } catch (java.util.concurrent.TimeoutException | java.util.concurrent.ExecutionException e) {
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** Completes the suspect READ (entry 0 of {@code suspect}) with {@code status}. */
    private void complete(ReadTable suspect, int status) {
        ch.node.countRead(status, 0);
        ch.deliver(suspect.listener(0), suspect.requestId(0), status, 0);
    }

    /**
     * Off the completion thread: destroys the failed queue pair (READs are posted again only once nothing
     * of it can land any more), asks the peer about the suspect READ (completing it with the peer's answer
     * when the READ was invalid), and connects a new queue pair. When the failed queue pair cannot be
     * destroyed in time, or the peer cannot be asked or reached, the channel fails.
     */
    private void recover(QueuePair old, ReadTable suspect, String cause) {
        if (old != null) {
            old.closeQuietly();
            boolean gone = awaitDestroyed(old);
            if (!gone) {
                VerbsChannel.LOG.warn("queue pair to {} was not destroyed within {} ms; the channel fails, and its "
                        + "READs complete once it is", ch.peer, QueuePair.CLOSE_WAIT_MS);
                if (suspect != null) {
                    Deliveries d = new Deliveries();
                    d.add(suspect.listener(0), suspect.requestId(0));
                    deliverOnceDestroyed(d, ReadStatus.CONNECTION_LOST, old, null);
                }
                ch.fail(ReadStatus.CONNECTION_LOST, cause + ", and the failed queue pair was not destroyed in time");
                return;
            }
            ch.lock.lock();
            try {
                if (ch.retiring == old) {
                    ch.retiring = null;
                }
            } finally {
                ch.lock.unlock();
            }
        }
        if (suspect != null) {
            int why;
            try {
                why = ch.node.diagnose(ch.peer, suspect.rkey(0), suspect.remote(0), suspect.length(0));
            } catch (IOException | RuntimeException e) {
                complete(suspect, ReadStatus.CONNECTION_LOST);
                ch.fail(ReadStatus.CONNECTION_LOST, cause + ", and the peer cannot be asked why: " + e.getMessage());
                return;
            }
            if (why != ReadStatus.SUCCESS) {
                VerbsChannel.LOG.info("peer {} refused READ {}: {}", ch.peer, suspect.describe(0),
                        ReadStatus.describe(why));
                complete(suspect, why);
            } else {
                boolean again;
                ch.lock.lock();
                try {
                    again = ch.state == VerbsChannel.RECOVERING && suspect.reposts(0) < MAX_REPOSTS;
                    if (again) {
                        ch.queue.addFirst(suspect, 0, suspect.reposts(0) + 1);
                    }
                } finally {
                    ch.lock.unlock();
                }
                if (!again) {
                    complete(suspect, ReadStatus.CONNECTION_LOST);
                }
            }
        }
        QueuePair fresh;
        try {
            fresh = ch.node.openEndpoint(ch.peer, ch.rdmaTarget, ch.node.connectTimeoutMs());
        } catch (IOException | RuntimeException e) {
            ch.fail(ReadStatus.CONNECTION_LOST, cause + ", and reconnecting failed: " + e.getMessage());
            return;
        }
        boolean unused;
        ch.lock.lock();
        try {
            unused = ch.state != VerbsChannel.RECOVERING;
            if (!unused) {
                ch.attach(fresh);
                ch.node.countReconnect();
                ch.drain();
            }
        } finally {
            ch.lock.unlock();
        }
        if (unused) {
            fresh.closeQuietly(); // never under the lock: closing may wait for the device's cm thread
        }
    }

    /**
     * Fails the channel when a READ has been outstanding or queued longer than the request timeout; when
     * READs have made no progress for the stall interval, asks the peer whether the oldest one is valid.
     */
    void checkTimeouts(long now, long keepAliveNanos) {
        String late = null;
        ReadTable stalled = null;
        long stalledSeq = -1;
        QueuePair keepAlive = null;
        ch.lock.lock();
        try {
            if (ch.state == VerbsChannel.CLOSED) {
                return;
            }
            if (ch.state == VerbsChannel.OPEN && ch.endpoint != null && now - ch.lastKeepAliveNanos > keepAliveNanos) {
                ch.lastKeepAliveNanos = now;
                keepAlive = ch.endpoint;
            }
            ReadWindow window = ch.window;
            ReadQueue queue = ch.queue;
            long progress = ch.lastProgressNanos;
            // Counted from the later of its post and the channel's last progress, this JVM's pauses not counted:
            // a long queue that moves is not a timeout, nor is a reader that did not run (Pauses).
            if (window.anyOlderThan(now, progress, requestTimeoutNanos)) {
                late = "a READ was outstanding";
            }
            int oldest = window.oldestBusy();
            long queued = queue.isEmpty() ? now : Math.max(queue.table().postNanos(queue.head()), progress);
            if (late == null && now - queued > requestTimeoutNanos
                    && now - queued - Pauses.pausedSince(queued) > requestTimeoutNanos) {
                late = "a READ waited to be posted";
            }
            if (late == null && ch.state == VerbsChannel.OPEN && oldest >= 0 && !stallCheckRunning
                    && now - progress > stallNanos) {
                stallCheckRunning = true;
                stalledSeq = window.slots.seq(oldest);
                stalled = new ReadTable(1);
                stalled.copy(window.slots, oldest, 0);
            }
        } finally {
            ch.lock.unlock();
        }
        if (keepAlive != null) {
            ch.node.sendKeepAlive(ch, ch.peer, keepAlive.localAddress());
        }
        if (late != null) {
            ch.fail(ReadStatus.TIMEOUT, late + " longer than spark.shuffle.rdma.requestTimeout ("
                    + TimeUnit.NANOSECONDS.toMillis(requestTimeoutNanos) + " ms)");
        } else if (stalled != null) {
            ReadTable s = stalled;
            long seq = stalledSeq;
            ch.node.execute(() -> checkStall(s, seq));
        }
    }

    /**
     * Off the timer: asks the peer about a READ that has made no progress (entry 0 of {@code s}); an
     * invalid one fails the queue pair. Whatever the asking throws, the next stall is checked again.
     */
    private void checkStall(ReadTable s, long seq) {
        int why = ReadStatus.SUCCESS;
        try {
            why = ch.node.diagnose(ch.peer, s.rkey(0), s.remote(0), s.length(0));
        } catch (IOException | RuntimeException e) {
            // the request timeout stays in charge
            VerbsChannel.LOG.debug("cannot ask {} about a stalled READ: {}", ch.peer, e.toString());
        } finally {
            ch.lock.lock();
            try {
                stallCheckRunning = false;
                if (why == ReadStatus.SUCCESS || ch.state != VerbsChannel.OPEN) {
                    ch.lastProgressNanos = System.nanoTime(); // valid, just slow: check again one interval later
                } else {
                    int slot = ch.window.busyWithSeq(seq);
                    if (slot >= 0) {
                        start(slot, "no completion for " + TimeUnit.NANOSECONDS.toMillis(stallNanos)
                                + " ms, and the peer says READ " + s.describe(0) + " is invalid: "
                                + ReadStatus.describe(why));
                    }
                }
            } finally {
                ch.lock.unlock();
            }
        }
    }

    /**
     * What became of a keep-alive: the peer's accepting node reaps a queue pair no keep-alive named for its
     * idle timeout. A channel with nothing outstanding whose peer answered none of the last two closes
     * (posting to it then says IDLE_CLOSED: connect again); with READs outstanding the request timeout
     * decides.
     */
    void keepAliveAnswered(boolean answered, String why) {
        boolean close;
        ch.lock.lock();
        try {
            keepAlivesUnanswered = answered ? 0 : keepAlivesUnanswered + 1;
            close = keepAlivesUnanswered >= 2 && ch.state == VerbsChannel.OPEN && ch.window.idle() && ch.queue.isEmpty();
        } finally {
            ch.lock.unlock();
        }
        if (close) {
            ch.fail(ReadStatus.IDLE_CLOSED, "the peer answered no keep-alive (" + why + ")");
        }
    }
}
