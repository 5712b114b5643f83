package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * "A READ's completion is reported only after its bytes have landed, and no buffer goes back to the pool
 * while a queue pair that could still write into it is alive", over {@link EmulatedVerbs} with the
 * timing that broke it: a completion a destroyed queue pair left in the completion queue reaching the
 * queue pair that reuses its number (a new channel's READs reported done before their bytes landed:
 * the pooled buffer still holds zeros or what it held before — the "corrupt map output metadata" of the
 * SoftiWARP fetch job, docs/verbs.md), and a channel failing while recovery is still destroying the
 * failed queue pair, which keeps writing (the READs' buffers handed back, re-used, then overwritten).
 */
class VerbsReadLandingTest {
    private static final int BLOCK = EmulatedPeers.BLOCK;

    private static boolean awaitTrue(java.util.function.BooleanSupplier c, long ms) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        while (!c.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                return false;
            }
            Thread.sleep(5);
        }
        return true;
    }

    @Test
    @Timeout(60)
    void shouldReportAReadDoneOnlyWithItsOwnBytesWhenACompletionOfADestroyedQueuePairReachesTheQueuePairReusingItsNumber()
            throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        try (EmulatedPeers p = new EmulatedPeers(device, Map.of(), 1, 8)) {
            RegionDescriptor d = p.region(0);
            RdmaChannel first = p.client.connect(p.servers.get(0).localAddress());
            device.pollPaused = true; // completions stay in the queue for now
            ReadBatch batch = new ReadBatch(4);
            for (int i = 0; i < 4; i++) {
                batch.add(d.address() + (long) i * BLOCK, d.rkey(), BLOCK, p.sink, i * BLOCK, i);
            }
            CountDownLatch firstDone = new CountDownLatch(4);
            first.post(batch, (id, st, len) -> firstDone.countDown());
            EmulatedVerbs.Device dev = p.clientDevice();
            assertTrue(awaitTrue(() -> dev.queued() == 1, 10_000), "the chain's signaled completion waits in the queue");
            first.close(); // its queue pair is destroyed, its number freed; its completion is still queued
            assertTrue(firstDone.await(10, TimeUnit.SECONDS));

            RdmaChannel second = p.client.connect(p.servers.get(0).localAddress()); // takes the freed number
            assertNotSame(first, second);
            device.landingDelayMs = 1_000;
            List<String> wrong = new ArrayList<>();
            CountDownLatch done = new CountDownLatch(4);
            batch.clear();
            for (int i = 4; i < 8; i++) {
                batch.add(d.address() + (long) i * BLOCK, d.rkey(), BLOCK, p.sink, i * BLOCK, i);
            }
            second.post(batch, (id, st, len) -> {
                // the moment a READ is reported done, its sink must hold its own bytes
                if (st == ReadStatus.SUCCESS && !p.holds((int) id, 0, (int) id)) {
                    synchronized (wrong) {
                        wrong.add("READ " + id + " reported done before its bytes landed");
                    }
                }
                done.countDown();
            });
            device.pollPaused = false;
            assertTrue(done.await(20, TimeUnit.SECONDS), "every READ completes");
            assertEquals(List.of(), wrong, "a stale completion of the destroyed queue pair completed the new one's READs");
            for (int i = 4; i < 8; i++) {
                assertTrue(p.holds(i, 0, i), "bytes of READ " + i);
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldHandNoReadBackWhileItsQueuePairCanStillWriteWhenTheChannelFailsDuringRecovery() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        device.closeWaits = false; // a second closeQuietly returns at once (as FfmQueuePair's did)
        int n = 4;
        try (EmulatedPeers p = new EmulatedPeers(device, Map.of(), 1, n)) {
            RegionDescriptor d = p.region(0);
            RdmaChannel ch = p.client.connect(p.servers.get(0).localAddress());
            CountDownLatch gate = new CountDownLatch(1);
            device.landingGate = gate; // the READs are on their way, and land only once the channel has failed
            device.destroyDelayMs = 1_000; // destroying the failed queue pair takes longer than that
            byte[] mark = new byte[BLOCK];
            java.util.Arrays.fill(mark, (byte) 0x5A);
            int[] statuses = new int[n];
            CountDownLatch done = new CountDownLatch(n);
            ReadBatch batch = new ReadBatch(n);
            for (int i = 0; i < n; i++) {
                batch.add(d.address() + (long) i * BLOCK, d.rkey(), BLOCK, p.sink, i * BLOCK, i);
            }
            ch.post(batch, (id, st, len) -> {
                statuses[(int) id] = st;
                // The READ is over for its owner: the buffer goes back to the pool, and the next request's
                // bytes land in it.
                p.sinkMemory.put((int) id * BLOCK, mark);
                done.countDown();
            });
            EmulatedVerbs.Device dev = p.clientDevice();
            QueuePair qp = dev.queuePairs().get(0);
            dev.reportDisconnected(qp); // its READs keep landing until it is destroyed
            assertTrue(awaitTrue(() -> dev.queuePairs().isEmpty() || qp.destroyed().isDone() || destroying(qp), 5_000));
            ch.close(); // while recovery is still destroying the failed queue pair
            Thread.sleep(50);
            gate.countDown(); // the READs land now, before the failed queue pair is destroyed
            assertTrue(done.await(20, TimeUnit.SECONDS), "every READ completes");
            assertTrue(awaitTrue(() -> qp.destroyed().isDone(), 10_000), "the failed queue pair is destroyed");
            for (int i = 0; i < n; i++) {
                assertEquals(-1, p.sinkMemory.slice(i * BLOCK, BLOCK).mismatch(java.nio.ByteBuffer.wrap(mark)),
                        "the sink of READ " + i + " was written after the READ was reported ("
                                + ReadStatus.describe(statuses[i]) + ")");
            }
        }
    }

    /** Whether recovery has begun destroying {@code qp} (a post to it is refused from then on). */
    private static boolean destroying(QueuePair qp) {
        try {
            qp.post(new ReadChain(1), 0);
            return false;
        } catch (java.io.IOException e) {
            return true;
        }
    }

    @Test
    @Timeout(60)
    void shouldKeepCheckingStallsWhenAskingThePeerThrowsARuntimeException() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        try (EmulatedPeers p = new EmulatedPeers(device, Map.of("spark.shuffle.rdma.verbs.stallCheck", "100ms",
                "spark.shuffle.rdma.requestTimeout", "120s"), 1, 1)) {
            RegionDescriptor d = p.region(0);
            RdmaChannel ch = p.client.connect(p.servers.get(0).localAddress());
            AtomicInteger asked = new AtomicInteger();
            p.client.diagnoseWith((peer, rkey, addr, len) -> {
                if (asked.incrementAndGet() == 1) {
                    throw new IllegalStateException("the control path broke in an unforeseen way");
                }
                return ReadStatus.UNKNOWN_KEY; // as a peer says of a READ some devices drop without a completion
            });
            device.landingDelayMs = 100_000; // the READ makes no progress: stalled
            int[] status = {-1};
            CountDownLatch done = new CountDownLatch(1);
            ch.post(new ReadBatch(1).add(d.address(), d.rkey(), BLOCK, p.sink, 0, 0), (id, st, len) -> {
                status[0] = st;
                done.countDown();
            });
            assertTrue(done.await(20, TimeUnit.SECONDS), "the stalled READ completes through a later stall check ("
                    + asked.get() + " diagnoses asked)");
            assertEquals(ReadStatus.UNKNOWN_KEY, status[0]);
        }
    }

    @Test
    @Timeout(60)
    void shouldStopTheNodeAndKeepTheBuffersWhenAQueuePairCannotBeDestroyed() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        try (EmulatedPeers p = new EmulatedPeers(device, Map.of(), 1, 1)) {
            RegionDescriptor d = p.region(0);
            RdmaChannel ch = p.client.connect(p.servers.get(0).localAddress());
            CountDownLatch gate = new CountDownLatch(1);
            device.landingGate = gate; // the READ is on its way
            CountDownLatch done = new CountDownLatch(1);
            ch.post(new ReadBatch(1).add(d.address(), d.rkey(), BLOCK, p.sink, 0, 0), (id, st, len) -> done.countDown());
            device.destroyFails = true;
            ch.close(); // its queue pair may stay alive
            assertTrue(awaitTrue(() -> p.client.failure() != null, 10_000),
                    "the node goes on as if the queue pair were gone");
            assertTrue(String.valueOf(p.client.failure()).contains("could not be destroyed"),
                    String.valueOf(p.client.failure()));
            assertFalse(done.await(500, TimeUnit.MILLISECONDS),
                    "the READ was handed back while its queue pair may still write into its buffer");
            gate.countDown();
        }
    }
}
