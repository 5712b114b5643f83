package org.rdmashuffle.shuffle.core.serve;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

class RegistrationCapTest {

    @Test
    @Timeout(30)
    void shouldLetAnotherMapCommitWhileOneIsStillRegisteringWithinTheCap() throws Exception {
        AtomicLong registered = new AtomicLong();
        RegistrationCap cap = new RegistrationCap(1000, registered::get);
        CountDownLatch registering = new CountDownLatch(1);
        CountDownLatch finish = new CountDownLatch(1);
        Thread slow = new Thread(() -> { // a map commit whose mapping and registration take long
            assertTrue(cap.reserve(600));
            registering.countDown();
            try {
                finish.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            registered.addAndGet(600);
            cap.release(600);
        });
        slow.start();
        assertTrue(registering.await(10, TimeUnit.SECONDS));
        // another map task commits meanwhile: it is neither blocked by the first nor let past the cap
        CompletableFuture<Boolean> fits = CompletableFuture.supplyAsync(() -> cap.reserve(400));
        assertTrue(fits.get(5, TimeUnit.SECONDS), "a commit waited for another's registration");
        assertFalse(cap.reserve(1), "the reservations together passed the cap");
        cap.release(400);
        finish.countDown();
        slow.join();
        assertEquals(0, cap.reservedBytes());
        assertFalse(cap.reserve(401), "what was registered counts against the cap");
        assertTrue(cap.reserve(400));
    }

    @Test
    void shouldReserveAnythingWithoutACap() {
        RegistrationCap none = new RegistrationCap(0, () -> Long.MAX_VALUE);
        assertTrue(none.reserve(Long.MAX_VALUE));
        none.release(Long.MAX_VALUE);
        assertEquals(0, none.reservedBytes());
    }
}
