package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * Handshaken connections that then say nothing cannot lock honest peers out of a node: at
 * {@code maxConnections} the least recently active one silent for at least a second makes room for the
 * newcomer, and a connection in use is never the one that goes.
 */
class TcpIdleConnectionEvictionTest {
    private static final byte[] SECRET = "idle-eviction-test-secret".getBytes(StandardCharsets.UTF_8);
    private static final int REGION_BYTES = 1 << 20;
    private static final int IDLE_CONNECTIONS = 1024;
    /** 127.0.0.2 .. 127.0.0.201: all of 127/8 is loopback on Linux. */
    private static final int SOURCE_ADDRESSES = 200;

    private static RdmaShuffleConf conf(String... kv) {
        Map<String, String> m = new HashMap<>();
        m.put("spark.shuffle.rdma.provider", "tcp");
        m.put("spark.shuffle.rdma.connectRetries", "0");
        for (int i = 0; i < kv.length; i += 2) {
            m.put("spark.shuffle.rdma." + kv[i], kv[i + 1]);
        }
        return new RdmaShuffleConf(m);
    }

    private static InetAddress[] loopbackAliases(int n) throws Exception {
        InetAddress[] a = new InetAddress[n];
        for (int i = 0; i < n; i++) {
            int host = 2 + i;
            a[i] = InetAddress.getByAddress(new byte[] {127, 0, (byte) (host >> 8), (byte) host});
        }
        return a;
    }

    private static InetSocketAddress target(TcpNode node) {
        return new InetSocketAddress(node.localAddress().host(), node.localAddress().port());
    }

    /** One READ of {@code length} bytes at {@code offset} over {@code ch}, checked byte for byte against {@code content}. */
    private static void readAndCheck(RdmaChannel ch, MemoryRegion sink, ByteBuffer sinkMem, RegionDescriptor d,
                                     ByteBuffer content, int offset, int length) throws Exception {
        for (int k = 0; k < length; k++) {
            sinkMem.put(k, (byte) ~content.get(offset + k)); // stale bytes never pass
        }
        CompletableFuture<Integer> done = new CompletableFuture<>();
        ch.post(new ReadBatch(1).add(d.address() + offset, d.rkey(), length, sink, 0, offset), (id, st, len) -> done.complete(st));
        assertEquals(ReadStatus.SUCCESS, (int) done.get(30, TimeUnit.SECONDS), "READ status");
        assertEquals(-1, sinkMem.duplicate().clear().limit(length)
                .mismatch(content.duplicate().clear().position(offset).limit(offset + length)), "READ bytes");
    }

    /** A node filled with 1,024 handshaken, then silent connections from 200 source addresses. */
    @TestInstance(TestInstance.Lifecycle.PER_CLASS)
    abstract static class FilledWithIdleConnections {
        private TcpNode server;
        private ByteBuffer content;
        private RegionDescriptor d;
        private TcpAttacks.IdleHandshaken idle;

        abstract byte[] secret();

        @BeforeAll
        @Timeout(120)
        void fillTheNode() throws Exception {
            server = new TcpNode(conf(), new NodeOptions("127.0.0.1", "127.0.0.1", ControlHandler.NONE, secret()));
            content = TcpAttacks.content(33, REGION_BYTES);
            d = server.register(content, RegionAccess.REMOTE_READ).descriptor();
            idle = new TcpAttacks.IdleHandshaken(target(server), loopbackAliases(SOURCE_ADDRESSES), IDLE_CONNECTIONS,
                    secret());
            assertEquals(IDLE_CONNECTIONS, idle.held.size(), "handshaken and held: " + idle);
            assertEquals(conf().maxConnections(), server.servedConnections(), "the node is full");
            Thread.sleep(1100); // every one of them silent for a second now
        }

        @AfterAll
        void release() {
            if (idle != null) {
                idle.close();
            }
            if (server != null) {
                server.close();
            }
        }

        @Test
        @Timeout(2)
        void shouldServeAnHonestPeerWhenIdleHandshakenConnectionsFillTheNode() throws Exception {
            NodeOptions options = new NodeOptions("127.0.0.1", "127.0.0.1", ControlHandler.NONE, secret());
            try (TcpNode client = new TcpNode(conf(), options)) {
                RdmaChannel ch = client.connect(server.localAddress());
                ByteBuffer sinkMem = ByteBuffer.allocateDirect(64 << 10);
                try (MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK)) {
                    readAndCheck(ch, sink, sinkMem, d, content, 12_345, 64 << 10);
                }
            }
            assertTrue(server.connectionsEvictedIdle() > 0, "idle connections evicted: "
                    + server.connectionsEvictedIdle());
            assertTrue(server.stats().connectionsEvictedIdle() > 0, "in the node's stats too");
        }
    }

    @Nested
    class WithoutAuthentication extends FilledWithIdleConnections {
        @Override
        byte[] secret() {
            return null;
        }
    }

    @Nested
    class WithAuthentication extends FilledWithIdleConnections {
        @Override
        byte[] secret() {
            return SECRET;
        }
    }

    @Test
    @Timeout(60)
    void shouldKeepServingARecentlyActiveConnectionWhenNewcomersEvictIdleOnes() throws Exception {
        RdmaShuffleConf conf = conf("maxConnections", "4");
        ByteBuffer content = TcpAttacks.content(34, REGION_BYTES);
        List<Socket> held = new ArrayList<>();
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback());
             TcpNode client = new TcpNode(conf, new NodeOptions("127.0.0.1", "127.0.0.1", ControlHandler.NONE, null))) {
            RegionDescriptor d = server.register(content, RegionAccess.REMOTE_READ).descriptor();
            NodeAddress at = server.localAddress();
            RdmaChannel ch = client.connect(at);
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(4096);
            try (MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK)) {
                readAndCheck(ch, sink, sinkMem, d, content, 0, 4096);
                InetAddress[] sources = loopbackAliases(3);
                try (TcpAttacks.IdleHandshaken idle = new TcpAttacks.IdleHandshaken(target(server), sources, 3, null)) {
                    assertEquals(3, idle.held.size(), "the node is full: " + idle);
                    int evictedBefore = 0;
                    for (int round = 0; round < 8; round++) {
                        // The honest channel READs every 100 ms while the others stay silent past a second.
                        for (int i = 0; i < 12; i++) {
                            readAndCheck(ch, sink, sinkMem, d, content, 4096 * (round * 12 + i), 4096);
                            Thread.sleep(100);
                        }
                        Socket s = TcpAttacks.open(target(server), sources[round % 3], 5000);
                        held.add(s);
                        int status;
                        try {
                            status = TcpAttacks.handshake(s, null);
                        } catch (java.io.IOException resetWhenRefused) {
                            status = Wire.HS_BUSY;
                        }
                        assertEquals(Wire.HS_OK, status, "a newcomer is admitted in place of a silent connection");
                        assertTrue(server.connectionsEvictedIdle() > evictedBefore, "one more evicted");
                        evictedBefore = (int) server.connectionsEvictedIdle();
                        readAndCheck(ch, sink, sinkMem, d, content, 4096 * round, 4096);
                    }
                }
            }
            assertTrue(ch.isOpen(), "the honest channel was never closed");
            assertEquals(1, client.stats().channelsOpened(), "and never opened again");
            assertEquals(0, client.stats().readsFailed(), "none of its READs failed");
        } finally {
            for (Socket s : held) {
                s.close();
            }
        }
    }

    /** Sends, on each socket every 200 ms, a keep-alive (a whole frame) or one byte of a frame that never completes. */
    private static Thread sender(List<Socket> sockets, boolean wholeFrames) {
        Thread t = new Thread(() -> {
            byte[] keepAlive = ByteBuffer.allocate(Wire.REQUEST_HEADER_BYTES).put(Wire.OP_CONTROL).array();
            try {
                for (int n = 0; !Thread.currentThread().isInterrupted(); n++) {
                    for (Socket s : sockets) {
                        if (wholeFrames) {
                            s.getOutputStream().write(keepAlive);
                        } else if (n < Wire.REQUEST_HEADER_BYTES - 1) {
                            s.getOutputStream().write(Wire.OP_READ); // a header that never completes
                        }
                    }
                    Thread.sleep(200);
                }
            } catch (InterruptedException | java.io.IOException e) {
                // stopped, or the node reset a socket: the test's assertions say which
            }
        }, "eviction-test-sender");
        t.setDaemon(true);
        t.start();
        return t;
    }

    /** Outcome of one newcomer's handshake on {@code server} from {@code source}. */
    private static int newcomer(TcpNode server, InetAddress source, List<Socket> held) throws Exception {
        Socket s = TcpAttacks.open(target(server), source, 5000);
        held.add(s);
        try {
            return TcpAttacks.handshake(s, null);
        } catch (java.io.IOException resetWhenRefused) {
            return Wire.HS_BUSY;
        }
    }

    @Test
    @Timeout(60)
    void shouldEvictNoneAndKeepServingWhenEveryOtherConnectionSendsAFrameEachSecond() throws Exception {
        RdmaShuffleConf conf = conf("maxConnections", "4");
        ByteBuffer content = TcpAttacks.content(35, REGION_BYTES);
        List<Socket> held = new ArrayList<>();
        Thread keepAlives = null;
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback());
             TcpNode client = new TcpNode(conf, new NodeOptions("127.0.0.1", "127.0.0.1", ControlHandler.NONE, null))) {
            RegionDescriptor d = server.register(content, RegionAccess.REMOTE_READ).descriptor();
            RdmaChannel ch = client.connect(server.localAddress());
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(4096);
            try (MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK);
                 TcpAttacks.IdleHandshaken flood = new TcpAttacks.IdleHandshaken(target(server), loopbackAliases(3), 3,
                         null)) {
                assertEquals(3, flood.held.size(), "the node is full: " + flood);
                keepAlives = sender(flood.held, true);
                Thread.sleep(1500); // the honest channel now silent for more than a second, the flood not
                for (int i = 0; i < 5; i++) {
                    readAndCheck(ch, sink, sinkMem, d, content, 4096 * i, 4096);
                    assertEquals(Wire.HS_BUSY, newcomer(server, loopbackAliases(4)[3], held),
                            "no connection silent for a second, so the newcomer is refused");
                }
                assertEquals(0, server.connectionsEvictedIdle(), "none evicted");
                readAndCheck(ch, sink, sinkMem, d, content, 8192, 4096);
            }
            assertTrue(ch.isOpen(), "the honest channel was never closed");
            assertEquals(1, client.stats().channelsOpened(), "and never opened again");
        } finally {
            if (keepAlives != null) {
                keepAlives.interrupt();
                keepAlives.join(5000);
            }
            for (Socket s : held) {
                s.close();
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldEvictAConnectionWhenItOnlyTricklesBytesOfAFrameThatNeverCompletes() throws Exception {
        RdmaShuffleConf conf = conf("maxConnections", "3");
        List<Socket> held = new ArrayList<>();
        Thread trickle = null;
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback());
             TcpAttacks.IdleHandshaken flood = new TcpAttacks.IdleHandshaken(target(server), loopbackAliases(3), 3,
                     null)) {
            assertEquals(3, flood.held.size(), "the node is full: " + flood);
            trickle = sender(flood.held, false);
            Thread.sleep(1500);
            assertEquals(Wire.HS_OK, newcomer(server, loopbackAliases(4)[3], held),
                    "bytes of a frame that never completes are no activity: a trickler makes room");
            assertEquals(1, server.connectionsEvictedIdle(), "one evicted");
        } finally {
            if (trickle != null) {
                trickle.interrupt();
                trickle.join(5000);
            }
            for (Socket s : held) {
                s.close();
            }
        }
    }

    /**
     * A task holding a channel pauses past a second (decoding a large block, a GC) while the node is full: its
     * connection may go to a newcomer, but its next READ must not fail — the channel says IDLE_CLOSED (connect
     * again, as the core's ReadPoster does), never CHANNEL_CLOSED or CONNECTION_LOST, which blame the peer.
     */
    @Test
    @Timeout(60)
    void shouldNotFailAHeldHonestChannelWhenItIsEvictedWhileIdle() throws Exception {
        RdmaShuffleConf conf = conf("maxConnections", "2");
        ByteBuffer content = TcpAttacks.content(36, REGION_BYTES);
        List<Socket> held = new ArrayList<>();
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback());
             TcpNode client = new TcpNode(conf, new NodeOptions("127.0.0.1", "127.0.0.1", ControlHandler.NONE, null))) {
            RegionDescriptor d = server.register(content, RegionAccess.REMOTE_READ).descriptor();
            RdmaChannel ch = client.connect(server.localAddress());
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(4096);
            try (MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK)) {
                readAndCheck(ch, sink, sinkMem, d, content, 0, 4096);
                assertEquals(Wire.HS_OK, newcomer(server, loopbackAliases(1)[0], held), "second slot");
                Thread.sleep(1500); // the task holding ch decodes for 1.5 s
                assertEquals(Wire.HS_OK, newcomer(server, loopbackAliases(2)[1], held), "evicts the idlest");
                assertEquals(1, server.connectionsEvictedIdle(), "the held channel's connection went");
                Thread.sleep(200);
                CompletableFuture<Integer> done = new CompletableFuture<>();
                int status;
                try {
                    ch.post(new ReadBatch(1).add(d.address(), d.rkey(), 4096, sink, 0, 0),
                            (id, st, len) -> done.complete(st));
                    status = done.get(30, TimeUnit.SECONDS);
                } catch (org.rdmashuffle.transport.TransportException e) {
                    status = e.status();
                }
                if (status != ReadStatus.SUCCESS) {
                    assertEquals(ReadStatus.IDLE_CLOSED, status, "the held honest channel's next READ: "
                            + ReadStatus.describe(status) + "; evicted " + server.connectionsEvictedIdle());
                    // What the core's ReadPoster does on IDLE_CLOSED: connect once more and post again.
                    ch = client.connect(server.localAddress());
                }
                readAndCheck(ch, sink, sinkMem, d, content, 8192, 4096);
            }
            assertEquals(0, client.stats().readsFailed(), "no READ of the held channel failed");
        } finally {
            for (Socket s : held) {
                s.close();
            }
        }
    }

    /**
     * With a secret, a silent connection goes only for a newcomer that proved it: raw connects that never say
     * HELLO, and handshakes with a wrong secret, close no honest channel however silent it is.
     */
    @Test
    @Timeout(60)
    void shouldEvictNoSilentChannelWhenNewcomersDoNotProveTheSecret() throws Exception {
        RdmaShuffleConf conf = conf("maxConnections", "2", "connectTimeout", "20s");
        ByteBuffer content = TcpAttacks.content(37, REGION_BYTES);
        byte[] wrong = "not-the-secret".getBytes(StandardCharsets.UTF_8);
        List<Socket> held = new ArrayList<>();
        NodeOptions withSecret = new NodeOptions("127.0.0.1", "127.0.0.1", ControlHandler.NONE, SECRET);
        try (TcpNode server = new TcpNode(conf, withSecret);
             TcpNode client = new TcpNode(conf, withSecret)) {
            RegionDescriptor d = server.register(content, RegionAccess.REMOTE_READ).descriptor();
            RdmaChannel ch = client.connect(server.localAddress());
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(4096);
            try (MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK);
                 TcpAttacks.IdleHandshaken idle = new TcpAttacks.IdleHandshaken(target(server), loopbackAliases(1), 1,
                         SECRET)) {
                readAndCheck(ch, sink, sinkMem, d, content, 0, 4096);
                assertEquals(1, idle.held.size(), "the node is full: " + idle);
                Thread.sleep(1500); // both silent past a second
                InetAddress[] sources = loopbackAliases(8);
                for (int i = 0; i < 6; i++) {
                    Socket s = TcpAttacks.open(target(server), sources[2 + i], 5000);
                    held.add(s);
                    if (i % 2 == 1) {
                        int status;
                        try {
                            status = TcpAttacks.handshake(s, wrong);
                        } catch (java.io.IOException resetWhenRefused) {
                            status = Wire.HS_BUSY;
                        }
                        assertTrue(status != Wire.HS_OK, "a wrong secret is never welcome: " + status);
                    } // else a raw connect that never says HELLO
                    Thread.sleep(300);
                }
                assertEquals(0, server.connectionsEvictedIdle(), "no silent channel closed for an unproven newcomer");
                readAndCheck(ch, sink, sinkMem, d, content, 4096, 4096);
                assertEquals(1, client.stats().channelsOpened(), "the honest channel lived on");
                Socket s = TcpAttacks.open(target(server), sources[1], 5000);
                held.add(s);
                assertEquals(Wire.HS_OK, TcpAttacks.handshake(s, SECRET), "a newcomer that proves the secret");
                assertEquals(1, server.connectionsEvictedIdle(), "made room by closing the silent one");
                readAndCheck(ch, sink, sinkMem, d, content, 8192, 4096);
            }
        } finally {
            for (Socket s : held) {
                s.close();
            }
        }
    }
}
