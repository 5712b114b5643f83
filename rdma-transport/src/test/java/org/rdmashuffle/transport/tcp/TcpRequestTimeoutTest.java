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
import org.rdmashuffle.transport.ReadListener;
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
     * A READ posted before a pause of this JVM (a collection, a stopped process) is not timed out for the time the
     * pause took: its timeout counts running time, so a reader that did not run blames no peer for its own silence.
     */
    @Test
    @Timeout(30)
    void shouldAddAPauseOfThisJvmToARequestTimeoutWhenThePeerIsSilent() throws Exception {
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
                long posted = System.nanoTime();
                ch.post(b, (id, st, len) -> {
                    completedAt.set(System.nanoTime());
                    status.set(st);
                    done.countDown();
                });
                Thread.sleep(1_000);
                long end = System.nanoTime();
                Pauses.record(end - TimeUnit.MILLISECONDS.toNanos(900), end); // as the watcher records one
                assertTrue(done.await(20, TimeUnit.SECONDS), "READ hung");
                assertEquals(ReadStatus.TIMEOUT, status.get());
                long waited = TimeUnit.NANOSECONDS.toMillis(completedAt.get() - posted);
                assertTrue(waited >= 3_850, "timed out " + waited + " ms after its post: its 3 s timeout and the "
                        + "0.9 s pause are 3.9 s");
            }
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
        try (ServerSocket silent = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            startSilentPeer(silent);
            RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                    "spark.shuffle.rdma.requestTimeout", "2s"));
            try (TcpNode server = new TcpNode(conf, NodeOptions.loopback());
                 TcpNode client = new TcpNode(conf, NodeOptions.loopback())) {
                MemoryRegion src = server.register(ByteBuffer.allocateDirect(4096), RegionAccess.REMOTE_READ);
                MemoryRegion sink = client.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK);
                RdmaChannel dead = client.connect(new NodeAddress("127.0.0.1", silent.getLocalPort(), "tcp"));
                RdmaChannel healthy = client.connect(server.localAddress());
                CountDownLatch done = new CountDownLatch(1);
                AtomicInteger status = new AtomicInteger(-1);
                ReadBatch b = new ReadBatch(1);
                b.add(1L << 32, 1234, 100, sink, 0, 0);
                long posted = System.nanoTime();
                dead.post(b, (id, st, len) -> {
                    status.set(st);
                    done.countDown();
                });
                ReadListener busy = (id, st, len) -> { // on the requester thread
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
                    while (System.nanoTime() - until < 0) {
                        Thread.onSpinWait();
                    }
                };
                long giveUp = posted + TimeUnit.SECONDS.toNanos(10);
                while (done.getCount() > 0 && System.nanoTime() - giveUp < 0) {
                    ReadBatch h = new ReadBatch(1);
                    h.add(src.descriptor().address(), src.descriptor().rkey(), 100, sink, 200, 1);
                    healthy.post(h, busy);
                    done.await(1_100, TimeUnit.MILLISECONDS);
                }
                assertEquals(0, done.getCount(), "the silent peer's READ (requestTimeout 2 s) had not timed out "
                        + "after 10 s of busy completions");
                assertEquals(ReadStatus.TIMEOUT, status.get());
            }
        }
    }

    /** Accepts one connection, completes the handshake, then reads requests and answers none. */
    static void startSilentPeer(ServerSocket silent) {
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
