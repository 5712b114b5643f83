package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;

/** A peer that completes the handshake and then never answers: READs must time out, not hang. */
class TcpRequestTimeoutTest {

    private static RdmaShuffleConf conf(String requestTimeout) {
        return new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.requestTimeout", requestTimeout));
    }

    @Test
    @Timeout(30)
    void shouldCompleteReadsWithTimeoutWhenPeerStopsAnswering() throws Exception {
        try (SilentPeer silent = new SilentPeer();
             TcpNode client = new TcpNode(conf("500ms"), NodeOptions.loopback())) {
            MemoryRegion sink = client.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK);
            RdmaChannel ch = client.connect(silent.address());
            CountDownLatch done = new CountDownLatch(10);
            AtomicInteger timedOut = new AtomicInteger();
            ReadBatch b = new ReadBatch(10);
            for (int i = 0; i < 10; i++) {
                b.add(1L << 32, 1234, 100, sink, 0, i);
            }
            long t0 = System.nanoTime();
            ch.post(b, (id, st, len) -> {
                if (st == ReadStatus.TIMEOUT) {
                    timedOut.incrementAndGet();
                }
                done.countDown();
            });
            assertTrue(done.await(10, TimeUnit.SECONDS), "READs hung");
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertEquals(10, timedOut.get());
            assertTrue(ms >= 450, "timed out after only " + ms + " ms");
            assertFalse(ch.isOpen());
        }
    }

    /**
     * A READ posted before a pause of this JVM (a collection, a stopped process) is not timed out for the time the
     * pause took: its timeout counts running time, so a reader that did not run blames no peer for its own silence.
     */
    @Test
    @Timeout(30)
    void shouldAddAPauseOfThisJvmToARequestTimeoutWhenThePeerIsSilent() throws Exception {
        try (SilentPeer silent = new SilentPeer();
             TcpNode client = new TcpNode(conf("3s"), NodeOptions.loopback())) {
            MemoryRegion sink = client.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK);
            SilentPeer.PendingRead read = new SilentPeer.PendingRead(client.connect(silent.address()), sink);
            Thread.sleep(1_000);
            long end = System.nanoTime();
            Pauses.record(end - TimeUnit.MILLISECONDS.toNanos(900), end); // as the watcher records one
            assertTrue(read.await(20_000), "READ hung");
            assertEquals(ReadStatus.TIMEOUT, read.status());
            long waited = read.completedAfterMs();
            assertTrue(waited >= 3_850, "timed out " + waited + " ms after its post: its 3 s timeout and the "
                    + "0.9 s pause are 3.9 s");
        }
    }

    /**
     * Completion work of another channel that holds the requester thread 1 s at a time — longer than the silence
     * that makes a pause — is no pause: the silent peer's READ still times out after its 2 s (only the watcher's
     * silence is a pause, and the watcher ran).
     */
    @Test
    @Timeout(30)
    void shouldTimeOutASilentPeerWhenTheRequesterThreadIsBusyWithAnotherPeersCompletions() throws Exception {
        RdmaShuffleConf conf = conf("2s");
        try (SilentPeer silent = new SilentPeer();
             TcpNode server = new TcpNode(conf, NodeOptions.loopback());
             TcpNode client = new TcpNode(conf, NodeOptions.loopback())) {
            MemoryRegion src = server.register(ByteBuffer.allocateDirect(4096), RegionAccess.REMOTE_READ);
            MemoryRegion sink = client.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK);
            RdmaChannel healthy = client.connect(server.localAddress());
            SilentPeer.PendingRead read = new SilentPeer.PendingRead(client.connect(silent.address()), sink);
            ReadListener busy = (id, st, len) -> { // on the requester thread
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
                while (System.nanoTime() - until < 0) {
                    Thread.onSpinWait();
                }
            };
            long giveUp = read.postedNanos + TimeUnit.SECONDS.toNanos(10);
            while (!read.completed() && System.nanoTime() - giveUp < 0) {
                ReadBatch h = new ReadBatch(1);
                h.add(src.descriptor().address(), src.descriptor().rkey(), 100, sink, 200, 1);
                healthy.post(h, busy);
                read.await(1_100);
            }
            assertTrue(read.completed(), "the silent peer's READ (requestTimeout 2 s) had not timed out after 10 s "
                    + "of busy completions");
            assertEquals(ReadStatus.TIMEOUT, read.status());
        }
    }
}
