package org.rdmashuffle.transport.verbs;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Room in a verbs node's one completion queue, shared by its channels: a channel takes room for each
 * READ it posts (each may make a work completion) and gives it back once the READ's completion was
 * polled, so the queue never overruns. A channel that finds none waits to be told
 * ({@link VerbsChannel#roomAvailable}, on a worker) once some comes back.
 */
final class CompletionRoom {
    private final VerbsNode node;
    private final AtomicInteger room;
    private final Set<VerbsChannel> waiting = ConcurrentHashMap.newKeySet();

    CompletionRoom(VerbsNode node, int completionQueueSize) {
        this.node = node;
        this.room = new AtomicInteger(completionQueueSize);
    }

    /** Takes room for up to {@code want} READs; returns how many (0: none left). */
    int take(int want) {
        for (;;) {
            int r = room.get();
            if (r <= 0) {
                return 0;
            }
            int k = Math.min(r, want);
            if (room.compareAndSet(r, r - k)) {
                return k;
            }
        }
    }

    /** Gives back room for {@code n} READs and tells the channels waiting for some. */
    void giveBack(int n) {
        if (n <= 0) {
            return;
        }
        room.addAndGet(n);
        if (!waiting.isEmpty()) {
            for (VerbsChannel c : waiting) {
                if (waiting.remove(c)) {
                    node.execute(c::roomAvailable);
                }
            }
        }
    }

    /** {@code c} found no room: it hears when some comes back (at once, when some came back meanwhile). */
    void await(VerbsChannel c) {
        waiting.add(c);
        if (room.get() > 0 && waiting.remove(c)) {
            node.execute(c::roomAvailable);
        }
    }

    /** {@code c} closed: it waits for nothing any more. */
    void forget(VerbsChannel c) {
        waiting.remove(c);
    }
}
