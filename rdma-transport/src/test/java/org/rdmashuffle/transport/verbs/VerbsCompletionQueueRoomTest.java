package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * A node keeps at most as many READs outstanding as its completion queue holds; when a queue pair fails,
 * its outstanding READs' room is not free until the completions it flushed into the queue have been
 * polled. Over {@link EmulatedVerbs}, whose bounded completion queue counts completions generated minus
 * polled and drops (counts) one that finds it full, as siw does — an overrun puts every queue pair of a
 * real node in error.
 */
class VerbsCompletionQueueRoomTest {
    private static final int BLOCK = EmulatedPeers.BLOCK;
    private static final int WINDOW = 16;
    private static final int PEERS = 4;
    private static final int QUEUE = WINDOW * PEERS; // the smallest completionQueueSize, 64: full windows fill it

    @Test
    @Timeout(120)
    void shouldNeverOverrunTheCompletionQueueWhenPortFlapsFailFullWindowsAgainAndAgain() throws Exception {
        // Each round: full windows on the wire, the port flaps twice, 100 ms apart, while the completion
        // thread takes 20 ms per completion; then everything lands.
        EmulatedVerbs device = new EmulatedVerbs();
        try (EmulatedPeers p = new EmulatedPeers(device, Map.of("spark.shuffle.rdma.verbs.completionQueueSize",
                Integer.toString(QUEUE)), PEERS, WINDOW)) {
            RdmaChannel[] ch = new RdmaChannel[PEERS];
            for (int s = 0; s < PEERS; s++) {
                ch[s] = p.client.connect(p.servers.get(s).localAddress());
            }
            EmulatedVerbs.Device dev = p.clientDevice();
            device.pollBatch = 1; // a completion leaves the queue only when the thread gets to it
            List<String> wrong = new ArrayList<>();
            for (int flap = 0; flap < 4; flap++) {
                device.pollDelayMicros = 0;
                java.util.concurrent.CountDownLatch gate = new java.util.concurrent.CountDownLatch(1);
                device.landingGate = gate; // full windows on the wire
                long before = device.posted.get();
                CountDownLatch done = new CountDownLatch(QUEUE);
                for (int s = 0; s < PEERS; s++) {
                    RegionDescriptor d = p.region(s);
                    ReadBatch b = new ReadBatch(WINDOW);
                    for (int i = 0; i < WINDOW; i++) {
                        int sinkBlock = s * WINDOW + i;
                        b.add(d.address() + (long) i * BLOCK, d.rkey(), BLOCK, p.sink, sinkBlock * BLOCK, sinkBlock);
                    }
                    int server = s;
                    int round = flap;
                    ch[s].post(b, (id, st, len) -> {
                        int block = (int) id - server * WINDOW;
                        if (st != ReadStatus.SUCCESS || !p.holds((int) id, server, block)) {
                            synchronized (wrong) {
                                wrong.add("flap " + round + ": READ " + id + " " + ReadStatus.describe(st));
                            }
                        }
                        done.countDown();
                    });
                }
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (device.posted.get() - before < QUEUE && System.nanoTime() < deadline) {
                    Thread.sleep(2);
                }
                assertEquals(QUEUE, device.posted.get() - before, "every window full before the flap");
                device.pollDelayMicros = 20_000; // the completion thread is much slower than recovery
                dev.flap(); // every queue pair fails: QUEUE flushed completions fill the queue
                Thread.sleep(100); // the first channels to hear of it post their READs again on fresh queue pairs
                dev.flap(); // and the port flaps again before the first flap's completions are polled
                device.landingGate = null;
                gate.countDown();
                assertTrue(done.await(60, TimeUnit.SECONDS), "every READ completes, posted again after the flap");
                for (int s = 0; s < PEERS * WINDOW; s++) {
                    p.sinkMemory.putLong(s * BLOCK, 0); // the next round's READs must land again
                }
            }
            assertEquals(List.of(), wrong);
            assertEquals(0, device.overruns.get(), "completions dropped: the completion queue of " + QUEUE
                    + " overran (it held up to " + device.deepest.get() + ")");
            assertTrue(device.deepest.get() <= QUEUE);
        }
    }
}
