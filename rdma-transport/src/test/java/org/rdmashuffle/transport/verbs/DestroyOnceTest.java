package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * How both APIs' queue pairs close: once; a second caller returns only when the first one's destroy is
 * done (within a bound), and "destroyed" completes only when the destroy succeeded.
 */
class DestroyOnceTest {
    @Test
    @Timeout(30)
    void shouldReturnToASecondCallerOnlyOnceTheFirstOnesDestroyIsDone() throws Exception {
        DestroyOnce d = new DestroyOnce();
        assertTrue(d.begin(10_000), "the first caller destroys");
        AtomicBoolean destroyDone = new AtomicBoolean();
        CountDownLatch secondStarted = new CountDownLatch(1);
        CompletableFuture<Boolean> second = CompletableFuture.supplyAsync(() -> {
            secondStarted.countDown();
            boolean first = d.begin(10_000);
            return !first && destroyDone.get();
        });
        assertTrue(secondStarted.await(10, TimeUnit.SECONDS));
        Thread.sleep(100);
        assertFalse(second.isDone(), "the second caller waits for the destroy");
        destroyDone.set(true);
        d.done(true);
        assertTrue(second.get(10, TimeUnit.SECONDS), "and returns once it is done");
        assertTrue(d.destroyed().isDone());
    }

    @Test
    @Timeout(30)
    void shouldBoundTheSecondCallersWaitAndNeverSayDestroyedWhenTheDestroyFailed() throws Exception {
        DestroyOnce d = new DestroyOnce();
        assertTrue(d.begin(0));
        assertFalse(d.begin(50), "bounded: returns although the destroy is not done");
        d.done(false);
        assertFalse(d.destroyed().isDone(), "a failed destroy may leave the queue pair alive");
    }
}
