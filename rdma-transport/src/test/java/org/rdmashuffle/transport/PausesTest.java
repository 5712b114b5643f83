package org.rdmashuffle.transport;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A timeout counts running time only: what a pause of this JVM took after the timeout began is added to it, no
 * more, and a stretch two threads saw counts once. The arithmetic runs on a record of its own ({@link Pauses.Kept});
 * the JVM's record gets only pauses ending now, which can only lengthen other tests' timeouts a little.
 */
class PausesTest {
    private static final long MS = TimeUnit.MILLISECONDS.toNanos(1);

    @Test
    void shouldAddOnlyThePartOfAPauseAfterTheTimeoutBeganWhenItsPausesAreAsked() {
        Pauses.Kept kept = new Pauses.Kept();
        long now = System.nanoTime();
        assertEquals(0, kept.since(now - 1_000 * MS), "nothing recorded");
        kept.add(now - 300 * MS, now - 200 * MS);
        kept.add(now - 100 * MS, now);
        assertEquals(200 * MS, kept.since(now - 400 * MS), "both pauses after it");
        assertEquals(150 * MS, kept.since(now - 250 * MS), "half of the first, all of the second");
        assertEquals(50 * MS, kept.since(now - 50 * MS), "the end of the second");
        assertEquals(0, kept.since(now), "none after now");
    }

    @Test
    void shouldCountAStretchOnceWhenTwoThreadsRecordTheSamePause() {
        Pauses.Kept kept = new Pauses.Kept();
        long now = System.nanoTime();
        assertEquals(590 * MS, kept.add(now - 600 * MS, now - 10 * MS));
        assertEquals(5 * MS, kept.add(now - 620 * MS, now - 5 * MS), "another thread's sight of it: 5 ms are new");
        assertEquals(0, kept.add(now - 300 * MS, now - 20 * MS), "inside it: nothing new");
        assertEquals(595 * MS, kept.since(now - 1_000 * MS));
        assertEquals(2, kept.count());
        assertEquals(590 * MS, kept.length(0), "the first, as its log line says");
        assertEquals(5 * MS, kept.length(1));
    }

    @Test
    void shouldKeepTheLatestPausesWhenMoreThanItKeepsAreRecorded() {
        Pauses.Kept kept = new Pauses.Kept();
        long now = System.nanoTime();
        for (int i = Pauses.KEPT + 4; i > 0; i--) {
            kept.add(now - (2 * i) * MS, now - (2 * i - 1) * MS);
        }
        assertEquals(Pauses.KEPT * MS, kept.since(now - 10_000 * MS),
                "the latest pauses of 1 ms each are kept; a wait older than the oldest kept counts fewer");
    }

    @Test
    @Timeout(30)
    void shouldRunTheWatcherWhileANodeHoldsALeaseAndStopItWhenTheLastCloses() throws Exception {
        int before = Pauses.leases(); // a node another test left open holds one
        Pauses.Lease first = Pauses.watch();
        Thread watcher = Pauses.watcher();
        assertTrue(watcher != null && watcher.isAlive(), "no watcher thread while a lease is open");
        assertEquals("rdma-shuffle-pause-watch", watcher.getName());
        assertTrue(watcher.isDaemon() && watcher.getContextClassLoader() == null, "it pins no class loader");
        Pauses.Lease second = Pauses.watch();
        first.close();
        first.close(); // twice is once
        assertEquals(before + 1, Pauses.leases());
        assertTrue(watcher.isAlive(), "the watcher stopped while a lease is still open");
        second.close();
        assertEquals(before, Pauses.leases());
        if (before == 0) {
            watcher.join(10_000);
            assertFalse(watcher.isAlive(), "the watcher runs on with every lease closed");
            assertEquals(null, Pauses.watcher());
        }
    }

    @Test
    @Timeout(30)
    void shouldWaitForAFutureAFullTimeoutOfRunningTimeWhenThisJvmPausedMeanwhile() throws Exception {
        CompletableFuture<String> slow = new CompletableFuture<>();
        Thread answer = new Thread(() -> {
            try {
                Thread.sleep(1_200);
                long end = System.nanoTime();
                Pauses.record(end - TimeUnit.MILLISECONDS.toNanos(1_100), end); // after the wait began
                Thread.sleep(2_100); // past the wait's 3 s, within 3 s of running time (4.1 s)
                slow.complete("answer");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        answer.start();
        assertEquals("answer", Pauses.get(slow, 3_000));
        answer.join();
        assertThrows(TimeoutException.class, () -> Pauses.get(new CompletableFuture<String>(), 200),
                "with no pause, the wait ends at its timeout");
    }
}
