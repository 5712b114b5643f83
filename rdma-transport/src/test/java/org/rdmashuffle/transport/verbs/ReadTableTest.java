package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.rdmashuffle.transport.ReadListener;

/** The flyweight READ table, the queue waiting for credits and the window of outstanding slots. */
class ReadTableTest {
    private static final ReadListener A = (id, status, len) -> { };
    private static final ReadListener B = (id, status, len) -> { };

    @Test
    void shouldKeepEveryFieldWhenAnEntryIsCopied() {
        ReadTable t = new ReadTable(2);
        t.set(0, 0xFFFF_0000_1234_5678L, 0x8000_0001, Integer.MAX_VALUE, 0x7000_0000_0000_0010L, -2, -7L, A,
                123_456_789_000L, 1);
        ReadTable u = new ReadTable(3);
        u.copy(t, 0, 2);
        assertEquals(0xFFFF_0000_1234_5678L, u.remote(2));
        assertEquals(0x8000_0001, u.rkey(2));
        assertEquals(Integer.MAX_VALUE, u.length(2));
        assertEquals(0x7000_0000_0000_0010L, u.local(2));
        assertEquals(-2, u.lkey(2));
        assertEquals(-7L, u.requestId(2));
        assertSame(A, u.listener(2));
        assertEquals(123_456_789_000L, u.postNanos(2));
        assertEquals(1, u.reposts(2));
        u.reposts(2, 2);
        assertEquals(2, u.reposts(2));
        assertEquals(Integer.MAX_VALUE, u.length(2));
        u.busy(2, true);
        u.clear(2);
        assertFalse(u.busy(2));
        assertNull(u.listener(2));
        assertEquals("(rkey 0x80000001, address 0xffff000012345678, 2147483647 bytes)", t.describe(0));
    }

    @Test
    void shouldKeepPostOrderWhenTheQueueGrowsWithReadsPutBackInFront() {
        ReadQueue q = new ReadQueue();
        for (int i = 0; i < 100; i++) {
            q.addLast(i, 1, 8, 0, 2, i, A, 0);
        }
        ReadTable back = new ReadTable(1);
        back.set(0, -1, 1, 8, 0, 2, -1, B, 0, 0);
        q.addFirst(back, 0, 1);
        assertEquals(101, q.size());
        assertEquals(-1, q.table().requestId(q.head()));
        assertEquals(1, q.table().reposts(q.head()));
        assertSame(B, q.table().listener(q.head()));
        q.removeFirst();
        for (int i = 0; i < 100; i++) {
            assertEquals(i, q.table().requestId(q.head()));
            q.removeFirst();
        }
        assertTrue(q.isEmpty());
    }

    @Test
    void shouldSignalEveryQuarterWindowAndRequeueOldestFirstWhenTheQueuePairFails() {
        ReadWindow w = new ReadWindow(8);
        ReadQueue q = new ReadQueue();
        for (int i = 0; i < 6; i++) {
            q.addLast(1000 + i, 5, 64, 2000 + i, 6, i, A, 0);
        }
        ReadChain c = new ReadChain(8);
        w.fillChain(q, 6, c, 3);
        assertEquals(2, w.available());
        assertArrayEquals(new boolean[] {false, true, false, true, false, true, false, false}, c.signaled);
        for (int j = 0; j < 6; j++) {
            assertEquals(3, WorkRequestIds.tag(c.wrId[j]));
            int slot = WorkRequestIds.slot(c.wrId[j]);
            assertEquals(j, w.slots.requestId(slot));
            assertEquals(1000 + j, c.remote[j]);
            assertEquals(2000 + j, c.local[j]);
        }
        assertEquals(WorkRequestIds.slot(c.wrId[0]), w.oldest());
        w.popOldest();
        w.release(WorkRequestIds.slot(c.wrId[0]));
        assertEquals(WorkRequestIds.slot(c.wrId[1]), w.oldestBusy());
        Deliveries givenUp = new Deliveries();
        assertEquals(5, w.requeueInPostOrder(q, givenUp, 2));
        assertEquals(0, givenUp.size());
        assertTrue(w.idle());
        for (int i = 1; i < 6; i++) {
            assertEquals(i, q.table().requestId(q.head()));
            assertEquals(1, q.table().reposts(q.head()));
            q.removeFirst();
        }
    }
}
