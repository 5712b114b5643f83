package org.rdmashuffle.transport.verbs;

import org.rdmashuffle.transport.ReadListener;

/**
 * READs of a channel waiting for a credit, oldest first: a ring over a {@link ReadTable} that doubles
 * when full (and never shrinks: a channel's queue is bounded by what its callers post). READs are taken
 * from the head, and go back to the head when a queue pair fails before they completed. Guarded by the
 * channel's lock.
 */
final class ReadQueue {
    private ReadTable table = new ReadTable(64);
    private int head;
    private int size;

    int size() {
        return size;
    }

    boolean isEmpty() {
        return size == 0;
    }

    /** The table holding the queued READs; {@link #head()} indexes the oldest. */
    ReadTable table() {
        return table;
    }

    /** The oldest queued READ's index in {@link #table()}; only while not empty. */
    int head() {
        return head;
    }

    /** Queues a READ posted now, behind every other. */
    void addLast(long remote, int rkey, int length, long local, int lkey, long requestId, ReadListener listener,
                 long postNanos) {
        if (size == table.capacity()) {
            grow();
        }
        int i = (head + size) & (table.capacity() - 1);
        table.set(i, remote, rkey, length, local, lkey, requestId, listener, postNanos, 0);
        size++;
    }

    /** Puts entry {@code i} of {@code src} back in front of every other, posted {@code reposts} times again. */
    void addFirst(ReadTable src, int i, int reposts) {
        if (size == table.capacity()) {
            grow();
        }
        head = (head - 1) & (table.capacity() - 1);
        table.copy(src, i, head);
        table.reposts(head, reposts);
        size++;
    }

    /** Drops the oldest READ (it went on to a slot, or was completed). */
    void removeFirst() {
        table.clear(head);
        head = (head + 1) & (table.capacity() - 1);
        size--;
    }

    /** Empties the queue, adding every READ to {@code d}, oldest first. */
    void drainTo(Deliveries d) {
        while (size > 0) {
            d.add(table.listener(head), table.requestId(head));
            removeFirst();
        }
    }

    private void grow() {
        ReadTable bigger = new ReadTable(table.capacity() * 2);
        int mask = table.capacity() - 1;
        for (int j = 0; j < size; j++) {
            bigger.copy(table, (head + j) & mask, j);
        }
        table = bigger;
        head = 0;
    }
}
