package org.rdmashuffle.transport.verbs;

import org.rdmashuffle.transport.Pauses;

/**
 * A channel's outstanding READs: {@code credits} slots in a {@link ReadTable} (a slot is the low half of
 * a work request id, {@link WorkRequestIds}), a stack of free ones, and a ring of the busy ones in post
 * order, since a queue pair completes its work requests in that order. {@link #fillChain} moves READs
 * from the queue into slots and writes them into the {@link ReadChain} to post, asking for a work
 * completion once in every {@code signalInterval} READs and at the end of each chain. Guarded by the
 * channel's lock.
 */
final class ReadWindow {
    final ReadTable slots;
    private final int credits;
    private final int[] free;
    private int freeTop;
    /** The outstanding slots in post order. */
    private final int[] ring;
    private int ringHead;
    private int ringSize;
    private long postSeq;
    /** Scratch for sorting the outstanding slots by post sequence (failures only). */
    private final int[] order;
    /** At most this many READs in a row are posted without asking for a work completion. */
    private final int signalInterval;
    private int unsignaledRun;

    ReadWindow(int credits) {
        this.credits = credits;
        slots = new ReadTable(credits);
        free = new int[credits];
        ring = new int[credits];
        order = new int[credits];
        signalInterval = Math.max(1, credits / 4);
        for (int i = 0; i < credits; i++) {
            free[i] = credits - 1 - i;
        }
        freeTop = credits;
    }

    int credits() {
        return credits;
    }

    /** Free slots. */
    int available() {
        return freeTop;
    }

    /** Whether no READ is outstanding. */
    boolean idle() {
        return freeTop == credits;
    }

    /**
     * Moves the {@code k} oldest READs of {@code q} into free slots (at most {@link #available()}) and
     * writes them, with ids tagged {@code tag}, into {@code c}.
     */
    void fillChain(ReadQueue q, int k, ReadChain c, int tag) {
        for (int j = 0; j < k; j++) {
            int slot = free[--freeTop];
            slots.copy(q.table(), q.head(), slot);
            q.removeFirst();
            slots.busy(slot, true);
            slots.seq(slot, postSeq++);
            ring[(ringHead + ringSize++) % credits] = slot;
            c.wrId[j] = WorkRequestIds.of(tag, slot);
            c.local[j] = slots.local(slot);
            c.length[j] = slots.length(slot);
            c.lkey[j] = slots.lkey(slot);
            c.remote[j] = slots.remote(slot);
            c.rkey[j] = slots.rkey(slot);
            boolean signaled = ++unsignaledRun >= signalInterval || j == k - 1;
            if (signaled) {
                unsignaledRun = 0;
            }
            c.signaled[j] = signaled;
        }
    }

    /**
     * Undoes {@link #fillChain} of {@code k} READs that post_send refused: they leave the ring and go back
     * to the head of {@code q} in their order.
     */
    void unpost(ReadChain c, int k, ReadQueue q) {
        ringSize -= k;
        for (int j = k - 1; j >= 0; j--) {
            int slot = WorkRequestIds.slot(c.wrId[j]);
            q.addFirst(slots, slot, slots.reposts(slot));
            release(slot);
        }
        unsignaledRun = 0;
    }

    /** Whether {@code slot} is a slot holding a READ and the ring is not empty. */
    boolean isOutstanding(int slot) {
        return slot >= 0 && slot < credits && slots.busy(slot) && ringSize > 0;
    }

    /** The oldest outstanding slot (the next a completion completes); only while one is outstanding. */
    int oldest() {
        return ring[ringHead];
    }

    /** The oldest outstanding READ completed: it leaves the ring (its slot is released by {@link #release}). */
    void popOldest() {
        ringHead = (ringHead + 1) % credits;
        ringSize--;
    }

    void release(int slot) {
        slots.clear(slot);
        free[freeTop++] = slot;
    }

    /** The busy slot with the lowest post sequence, or -1. */
    int oldestBusy() {
        int oldest = -1;
        for (int s = 0; s < credits; s++) {
            if (slots.busy(s) && (oldest < 0 || slots.seq(s) < slots.seq(oldest))) {
                oldest = s;
            }
        }
        return oldest;
    }

    /** The busy slot posted with sequence {@code seq}, or -1. */
    int busyWithSeq(long seq) {
        for (int s = 0; s < credits; s++) {
            if (slots.busy(s) && slots.seq(s) == seq) {
                return s;
            }
        }
        return -1;
    }

    /**
     * Whether an outstanding READ is older than {@code timeoutNanos}, counted from the later of its post and
     * {@code since}, this JVM's pauses meanwhile not counted ({@link Pauses}).
     */
    boolean anyOlderThan(long now, long since, long timeoutNanos) {
        for (int s = 0; s < credits; s++) {
            long from = Math.max(slots.postNanos(s), since);
            if (slots.busy(s) && now - from > timeoutNanos && now - from - Pauses.pausedSince(from) > timeoutNanos) {
                return true;
            }
        }
        return false;
    }

    /**
     * Puts the outstanding READs back at the head of {@code q}, oldest first, each posted once more; READs
     * already posted again {@code maxReposts} times go to {@code givenUp} instead. Empties the window.
     *
     * @return how many were outstanding
     */
    int requeueInPostOrder(ReadQueue q, Deliveries givenUp, int maxReposts) {
        int n = 0;
        for (int s = 0; s < credits; s++) {
            if (slots.busy(s)) {
                order[n++] = s;
            }
        }
        // Insertion sort by post sequence (at most `credits` entries, off the hot path).
        for (int i = 1; i < n; i++) {
            int v = order[i];
            int j = i - 1;
            while (j >= 0 && slots.seq(order[j]) > slots.seq(v)) {
                order[j + 1] = order[j];
                j--;
            }
            order[j + 1] = v;
        }
        for (int j = n - 1; j >= 0; j--) {
            int s = order[j];
            if (slots.reposts(s) < maxReposts) {
                q.addFirst(slots, s, slots.reposts(s) + 1);
            } else {
                givenUp.add(slots.listener(s), slots.requestId(s));
            }
            release(s);
        }
        ringHead = 0;
        ringSize = 0;
        return n;
    }

    /**
     * Empties the window, adding every outstanding READ to {@code d} (in slot order).
     *
     * @return how many were outstanding
     */
    int drainTo(Deliveries d) {
        int n = 0;
        for (int s = 0; s < credits; s++) {
            if (slots.busy(s)) {
                d.add(slots.listener(s), slots.requestId(s));
                release(s);
                n++;
            }
        }
        ringHead = 0;
        ringSize = 0;
        return n;
    }
}
