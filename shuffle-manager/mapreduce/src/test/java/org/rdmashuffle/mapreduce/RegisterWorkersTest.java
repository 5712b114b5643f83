package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The register workers' rules: a job on one worker at most, round-robin across jobs, waiting REGISTERs bounded. */
@Timeout(60)
class RegisterWorkersTest {
    /** A REGISTER that records its name when it runs, after {@code gate} opens. */
    private static RegisterWorkers.Work work(String name, List<String> ran, CountDownLatch gate, List<String> refused) {
        return new RegisterWorkers.Work() {
            @Override
            public void run() {
                try {
                    gate.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                ran.add(name);
            }

            @Override
            public void refuse(String reason) {
                refused.add(name + ": " + reason);
            }
        };
    }

    private static void awaitRan(List<String> ran, int n) throws InterruptedException {
        while (ran.size() < n) {
            Thread.sleep(5); // bounded by the class's timeout
        }
    }

    @Test
    void shouldServeJobsInTurnWhenOneJobHasManyRegistersWaiting() throws Exception {
        List<String> ran = Collections.synchronizedList(new ArrayList<>());
        List<String> refused = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch gate = new CountDownLatch(1);
        RegisterWorkers workers = new RegisterWorkers(2, 64, 16, "test-register");
        try {
            for (int i = 1; i <= 3; i++) {
                assertNull(workers.submit("a", work("a" + i, ran, gate, refused)));
            }
            // Job a takes one worker however many of its REGISTERs wait: b runs on the other one meanwhile.
            CountDownLatch bRan = new CountDownLatch(1);
            assertNull(workers.submit("b", new RegisterWorkers.Work() {
                @Override
                public void run() {
                    ran.add("b1");
                    bRan.countDown();
                }

                @Override
                public void refuse(String reason) {
                    refused.add("b1");
                }
            }));
            assertTrue(bRan.await(30, TimeUnit.SECONDS), "job b waited behind job a's REGISTERs");
            assertEquals(List.of("b1"), ran);
            while (workers.waiting() > 2) {
                Thread.sleep(5); // a1 is being taken by the other worker
            }
            assertEquals(2, workers.waiting()); // a2 and a3 wait for a1, which holds its worker
            gate.countDown();
            awaitRan(ran, 4);
        } finally {
            gate.countDown();
            assertTrue(workers.close(30_000));
            workers.close();
        }
        assertEquals(List.of("b1", "a1", "a2", "a3"), ran);
        assertEquals(List.of(), refused);
    }

    @Test
    void shouldTakeTurnsAcrossJobsOnOneWorkerWhenSeveralJobsWait() throws Exception {
        List<String> ran = Collections.synchronizedList(new ArrayList<>());
        List<String> refused = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch gate = new CountDownLatch(1);
        CountDownLatch open = new CountDownLatch(0);
        RegisterWorkers workers = new RegisterWorkers(1, 64, 16, "test-register");
        try {
            assertNull(workers.submit("a", work("a1", ran, gate, refused))); // holds the one worker
            assertNull(workers.submit("a", work("a2", ran, open, refused)));
            assertNull(workers.submit("a", work("a3", ran, open, refused)));
            assertNull(workers.submit("b", work("b1", ran, open, refused)));
            assertNull(workers.submit("b", work("b2", ran, open, refused)));
            assertNull(workers.submit("c", work("c1", ran, open, refused)));
            gate.countDown();
            awaitRan(ran, 6);
        } finally {
            gate.countDown();
            assertTrue(workers.close(30_000));
            workers.close();
        }
        assertEquals(List.of("a1", "b1", "c1", "a2", "b2", "a3"), ran);
    }

    @Test
    void shouldRefuseARegisterPastItsJobsShareOrPastAllWaitingAndWhenClosed() throws Exception {
        List<String> ran = Collections.synchronizedList(new ArrayList<>());
        List<String> refused = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch gate = new CountDownLatch(1);
        RegisterWorkers workers = new RegisterWorkers(1, 4, 2, "test-register");
        try {
            assertNull(workers.submit("a", work("a1", ran, gate, refused)));
            while (workers.waiting() > 0) {
                Thread.sleep(5); // a1 taken by the worker
            }
            assertNull(workers.submit("a", work("a2", ran, gate, refused)));
            assertNull(workers.submit("a", work("a3", ran, gate, refused)));
            String share = workers.submit("a", work("a4", ran, gate, refused));
            assertEquals("2 REGISTERs of this job are waiting already", share);
            assertNull(workers.submit("b", work("b1", ran, gate, refused)));
            assertNull(workers.submit("c", work("c1", ran, gate, refused)));
            // 4 wait in all: a job with none waiting is still admitted, a job with one waiting is not.
            assertNull(workers.submit("d", work("d1", ran, gate, refused)));
            assertEquals(5, workers.waiting());
            assertEquals("4 REGISTERs are waiting already", workers.submit("d", work("d2", ran, gate, refused)));
            assertEquals("4 REGISTERs are waiting already", workers.submit("b", work("b2", ran, gate, refused)));
        } finally {
            workers.close(0); // refuses what waits; a1 still holds the worker
            gate.countDown();
            assertTrue(workers.close(30_000));
            workers.close();
        }
        assertEquals(List.of("a1"), ran);
        assertEquals(5, refused.size(), refused.toString());
        assertTrue(refused.stream().allMatch(r -> r.endsWith("the service is stopping")), refused.toString());
        assertEquals("the service is stopping", workers.submit("e", work("e1", ran, gate, refused)));
    }

    @Test
    void shouldSkipAWaitingRegisterWhenItsReplyWasCancelled() throws Exception {
        List<String> ran = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch gate = new CountDownLatch(1);
        CountDownLatch entered = new CountDownLatch(1);
        RegisterWorkers workers = new RegisterWorkers(1, 4, 2, "test-register");
        try {
            org.rdmashuffle.transport.ControlHandler handler = workers.handler((realm, request) -> {
                entered.countDown();
                try {
                    gate.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                ran.add(realm);
                return java.nio.ByteBuffer.allocate(1);
            });
            java.util.concurrent.CompletableFuture<java.nio.ByteBuffer> first =
                    handler.onMessageAsync("a", java.nio.ByteBuffer.allocate(1));
            assertTrue(entered.await(30, TimeUnit.SECONDS), "the first REGISTER never ran");
            java.util.concurrent.CompletableFuture<java.nio.ByteBuffer> gone =
                    handler.onMessageAsync("b", java.nio.ByteBuffer.allocate(1));
            java.util.concurrent.CompletableFuture<java.nio.ByteBuffer> kept =
                    handler.onMessageAsync("c", java.nio.ByteBuffer.allocate(1));
            assertTrue(gone.cancel(false)); // its reducer gave up (its connection closed) while it waited
            gate.countDown();
            kept.get(30, TimeUnit.SECONDS);
            first.get(30, TimeUnit.SECONDS);
            assertEquals(List.of("a", "c"), ran, "a REGISTER whose reply was cancelled still did its work");
            assertEquals(1, workers.skipped());
        } finally {
            gate.countDown();
            workers.close(30_000);
            workers.close();
        }
    }
}
