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

/** A pause of this JVM moves where timeouts count from; a thread that is merely a little late does not. */
class PausesTest {

    @Test
    void shouldCountFromTheEndOfAPauseOnlyWhenAThreadWokeAtLeastThePauseMinimumLate() {
        long start = System.nanoTime();
        long now = start + TimeUnit.SECONDS.toNanos(1);
        assertFalse(Pauses.observed(now - Pauses.MIN_PAUSE_NANOS + 1, now), "a thread 1 ns short of a pause");
        assertEquals(start, Pauses.countFrom(start));
        assertTrue(Pauses.observed(now - Pauses.MIN_PAUSE_NANOS, now));
        assertEquals(now, Pauses.countFrom(start), "a timeout started before the pause counts from its end");
        long later = now + 1;
        assertEquals(later, Pauses.countFrom(later), "one started after it counts from its own start");
        assertTrue(Pauses.observed(start, now - 5), "an older sight of a pause");
        assertEquals(now, Pauses.countFrom(start), "never moves the recorded end back");
    }

    @Test
    void shouldRoundLateOnlyWhenTheThreadDidNotRunForAPause() throws Exception {
        Pauses.Rounds rounds = new Pauses.Rounds(TimeUnit.MILLISECONDS.toNanos(10));
        long first = rounds.next();
        assertTrue(Pauses.countFrom(first) == first, "a round on time records no pause");
        Thread.sleep(TimeUnit.NANOSECONDS.toMillis(Pauses.MIN_PAUSE_NANOS) + 100);
        long late = rounds.next();
        assertEquals(late, Pauses.countFrom(first), "a round a pause late records one ending then");
    }

    @Test
    @Timeout(30)
    void shouldWaitForAFutureAFullTimeoutAfterAPauseThatEndedDuringTheWait() throws Exception {
        CompletableFuture<String> slow = new CompletableFuture<>();
        Thread answer = new Thread(() -> {
            try {
                Thread.sleep(1_000);
                long end = System.nanoTime();
                Pauses.observed(end - Pauses.MIN_PAUSE_NANOS, end); // as a late thread sees one
                Thread.sleep(2_500); // past the 3 s from the wait's start, within 3 s of the pause's end
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
