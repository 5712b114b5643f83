package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;

/** A peer that completes the handshake and then never answers: READs must time out, not hang. */
class TcpRequestTimeoutTest {

    @Test
    @Timeout(30)
    void shouldCompleteReadsWithTimeoutWhenPeerStopsAnswering() throws Exception {
        try (ServerSocket silent = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            startSilentPeer(silent);
            RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                    "spark.shuffle.rdma.requestTimeout", "500ms"));
            try (TcpNode client = new TcpNode(conf, NodeOptions.loopback())) {
                MemoryRegion sink = client.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK);
                RdmaChannel ch = client.connect(new NodeAddress("127.0.0.1", silent.getLocalPort(), "tcp"));
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
    }

    /**
     * Reads posted before a pause of this JVM (a collection, a stopped process) do not time out for the time it
     * lasted: their timeout counts from its end, so a reader that did not run blames no peer for its own silence.
     */
    @Test
    @Timeout(30)
    void shouldCountTheRequestTimeoutFromTheEndOfAPauseOfThisJvm() throws Exception {
        try (ServerSocket silent = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            startSilentPeer(silent);
            RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                    "spark.shuffle.rdma.requestTimeout", "3s"));
            try (TcpNode client = new TcpNode(conf, NodeOptions.loopback())) {
                MemoryRegion sink = client.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK);
                RdmaChannel ch = client.connect(new NodeAddress("127.0.0.1", silent.getLocalPort(), "tcp"));
                CountDownLatch done = new CountDownLatch(1);
                AtomicLong completedAt = new AtomicLong();
                AtomicInteger status = new AtomicInteger(-1);
                ReadBatch b = new ReadBatch(1);
                b.add(1L << 32, 1234, 100, sink, 0, 0);
                ch.post(b, (id, st, len) -> {
                    completedAt.set(System.nanoTime());
                    status.set(st);
                    done.countDown();
                });
                Thread.sleep(1_000);
                long pauseEnd = System.nanoTime();
                assertTrue(Pauses.observed(pauseEnd - Pauses.MIN_PAUSE_NANOS, pauseEnd)); // as a late thread sees one
                assertTrue(done.await(20, TimeUnit.SECONDS), "READ hung");
                assertEquals(ReadStatus.TIMEOUT, status.get());
                long afterPause = TimeUnit.NANOSECONDS.toMillis(completedAt.get() - pauseEnd);
                assertTrue(afterPause >= 2_900, "timed out " + afterPause + " ms after the pause ended, not a full "
                        + "request timeout (3 s) after it");
            }
        }
    }

    /** Accepts one connection, completes the handshake, then reads requests and answers none. */
    private static void startSilentPeer(ServerSocket silent) {
        Thread peer = new Thread(() -> {
            try (Socket s = silent.accept()) {
                DataInputStream in = new DataInputStream(s.getInputStream());
                in.readFully(new byte[Wire.HELLO_BYTES]);
                OutputStream out = s.getOutputStream();
                out.write(ByteBuffer.allocate(Wire.CHALLENGE_BYTES).putInt(Wire.MAGIC).putShort(Wire.VERSION)
                        .putShort((short) 0).array());
                in.readFully(new byte[Wire.AUTH_BYTES]);
                out.write(new byte[Wire.WELCOME_BYTES]);
                out.flush();
                while (in.read() >= 0) {
                    // swallow requests, answer none
                }
            } catch (Exception e) {
                // the client gave up and closed
            }
        });
        peer.setDaemon(true);
        peer.start();
    }
}
