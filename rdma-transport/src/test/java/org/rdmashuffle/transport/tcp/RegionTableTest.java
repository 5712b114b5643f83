package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RegionAccess;

/**
 * The tcp provider's rkey table: what the responder finds (live regions only, whatever came and went before),
 * that it gives memory back when emptied, and that a key is never handed out twice by a node.
 */
class RegionTableTest {
    private static final ByteBuffer MEMORY = ByteBuffer.allocateDirect(64);

    private static TcpRegion region(int rkey) {
        return new TcpRegion(null, rkey, (long) rkey << 32, MEMORY.duplicate(), RegionAccess.REMOTE_READ, false, null);
    }

    @Test
    void shouldFindEveryLiveKeyAndNoRemovedOneWhenKeysComeAndGoAtRandom() {
        RegionTable table = new RegionTable();
        Map<Integer, TcpRegion> live = new HashMap<>();
        List<Integer> removed = new ArrayList<>();
        SplittableRandom rnd = new SplittableRandom(7);
        for (int step = 0; step < 40_000; step++) {
            // Phases that grow, churn at a level and empty the table, so that it grows, rebuilds and shrinks.
            int phase = step / 10_000;
            boolean add = live.isEmpty() || (phase == 0 ? rnd.nextInt(10) < 8 : phase == 3 ? rnd.nextInt(10) < 2
                    : rnd.nextBoolean());
            if (add) {
                int k;
                do {
                    k = rnd.nextInt();
                } while (k == 0 || live.containsKey(k));
                TcpRegion r = region(k);
                table.put(r);
                live.put(k, r);
            } else {
                int k = live.keySet().iterator().next();
                table.remove(k);
                live.remove(k);
                removed.add(k);
            }
            if (step % 397 == 0) {
                assertEquals(live.size(), table.size());
                for (Map.Entry<Integer, TcpRegion> e : live.entrySet()) {
                    assertSame(e.getValue(), table.get(e.getKey()), "live rkey " + e.getKey());
                }
                for (int i = Math.max(0, removed.size() - 200); i < removed.size(); i++) {
                    int k = removed.get(i);
                    if (!live.containsKey(k)) {
                        assertNull(table.get(k), "removed rkey " + k);
                    }
                }
            }
        }
        assertEquals(live.size(), table.all().length);
        assertEquals(new HashSet<>(live.values()), Set.of(table.all()));
    }

    @Test
    void shouldGiveItsSlotsBackWhenEmptiedAfterHoldingManyRegions() {
        RegionTable table = new RegionTable();
        int n = 20_000;
        int empty = table.capacity();
        for (int k = 1; k <= n; k++) {
            table.put(region(k));
        }
        assertTrue(table.capacity() >= n, "holds " + n + " in " + table.capacity() + " slots");
        for (int k = 1; k <= n; k++) {
            table.remove(k);
        }
        assertEquals(0, table.size());
        assertEquals(empty, table.capacity(), "an emptied table keeps its slots");
        assertNull(table.get(1));
        assertEquals(0, table.all().length);
    }

    @Test
    void shouldAnswerAKeyThatWasNeverThereAndARemovedOneAsAbsent() {
        RegionTable table = new RegionTable();
        table.put(region(5));
        table.remove(5);
        table.remove(5); // twice: nothing happens
        table.remove(6); // never there
        assertNull(table.get(5));
        assertNull(table.get(6));
        assertFalse(table.contains(5));
        assertEquals(0, table.size());
    }

    @Test
    @Timeout(60)
    void shouldFindARegionLiveThroughoutWhileAnotherThreadGrowsAndShrinksTheTable() throws Exception {
        RegionTable table = new RegionTable();
        TcpRegion kept = region(-1);
        table.put(kept);
        AtomicReference<String> wrong = new AtomicReference<>();
        CountDownLatch done = new CountDownLatch(1);
        Thread reader = new Thread(() -> {
            long lookups = 0;
            while (done.getCount() > 0 || lookups == 0) {
                if (table.get(-1) != kept) {
                    wrong.compareAndSet(null, "the live region was not found after " + lookups + " lookups");
                }
                TcpRegion other = table.get(3);
                if (other != null && other.rkey != 3) {
                    wrong.compareAndSet(null, "rkey 3 found region " + other.rkey);
                }
                lookups++;
            }
        });
        reader.start();
        for (int round = 0; round < 20; round++) {
            for (int k = 1; k <= 2_000; k++) {
                table.put(region(k));
            }
            for (int k = 1; k <= 2_000; k++) {
                table.remove(k);
            }
        }
        done.countDown();
        reader.join();
        assertNull(wrong.get());
        assertSame(kept, table.get(-1));
    }

    @Test
    @Timeout(120)
    void shouldNeverHandOutAnRkeyTwiceWhenRegionsComeAndGo() throws Exception {
        // Random 32-bit keys repeat among 200,000 registrations with a probability of 99 %; a stale rkey that
        // names a new region would be answered for that region instead of as an unknown key.
        RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp"));
        ByteBuffer memory = ByteBuffer.allocateDirect(4096);
        Set<Integer> seen = new HashSet<>();
        try (TcpNode node = new TcpNode(conf, NodeOptions.loopback())) {
            for (int i = 0; i < 200_000; i++) {
                try (MemoryRegion r = node.register(memory, RegionAccess.REMOTE_READ)) {
                    int rkey = r.descriptor().rkey();
                    assertTrue(seen.add(rkey), "rkey " + rkey + " handed out again after " + i + " registrations");
                }
            }
        }
    }
}
