package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/**
 * What a hostile or broken peer can do to a tcp node, from raw sockets written to
 * docs/wire-format.md: replies pending for one connection while others READ the same region, giant
 * and unfinished control bodies, thousands of idle and half-open connections, handlers and
 * listeners that throw {@code Error}s. Each time the node keeps serving a good client byte for byte
 * and gives back what the peers made it hold.
 */
class TcpResponderLimitsTest {
    private static final int REGION_BYTES = 4 << 20;

    private static RdmaShuffleConf conf(String... kv) {
        Map<String, String> m = new HashMap<>();
        m.put("spark.shuffle.rdma.provider", "tcp");
        for (int i = 0; i < kv.length; i += 2) {
            m.put("spark.shuffle.rdma." + kv[i], kv[i + 1]);
        }
        return new RdmaShuffleConf(m);
    }

    private static ByteBuffer randomDirect(long seed, int n) {
        byte[] b = new byte[n];
        new SplittableRandom(seed).nextBytes(b);
        return ByteBuffer.allocateDirect(n).put(b).clear();
    }

    private static Socket rawConnect(TcpNode server, int receiveBuffer) throws IOException {
        Socket s = new Socket();
        if (receiveBuffer > 0) {
            s.setReceiveBufferSize(receiveBuffer);
        }
        s.connect(new InetSocketAddress("127.0.0.1", server.localAddress().port()), 5000);
        s.setSoTimeout(20_000);
        return s;
    }

    private static byte[] helloAndAuth() {
        return ByteBuffer.allocate(Wire.HELLO_BYTES + Wire.AUTH_BYTES).putInt(Wire.MAGIC).putShort(Wire.VERSION)
                .putShort((short) 0).put(new byte[Wire.NONCE_BYTES]).put(new byte[Wire.PROOF_BYTES]).array();
    }

    /** A handshake without a secret, checked. */
    private static DataInputStream handshake(Socket s) throws IOException {
        s.getOutputStream().write(helloAndAuth());
        DataInputStream in = new DataInputStream(s.getInputStream());
        byte[] reply = new byte[Wire.CHALLENGE_BYTES + Wire.WELCOME_BYTES];
        in.readFully(reply);
        ByteBuffer r = ByteBuffer.wrap(reply);
        assertEquals(Wire.MAGIC, r.getInt());
        r.getShort();
        assertEquals(Wire.HS_OK, r.getShort());
        r.position(Wire.CHALLENGE_BYTES);
        assertEquals(Wire.HS_OK, r.getInt());
        return in;
    }

    private static byte[] readFrame(int id, RegionDescriptor d, long offset, int length) {
        return ByteBuffer.allocate(Wire.REQUEST_HEADER_BYTES).put(Wire.OP_READ).put(new byte[3]).putInt(id)
                .putInt(length).putInt(d.rkey()).putLong(d.address() + offset).array();
    }

    private static byte[] controlHeader(int id, int length) {
        return ByteBuffer.allocate(Wire.REQUEST_HEADER_BYTES).put(Wire.OP_CONTROL).put(new byte[3]).putInt(id)
                .putInt(length).putInt(0).putLong(0).array();
    }

    private static void await(BooleanSupplier condition, long seconds, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "not within " + seconds + " s: " + what);
            Thread.sleep(20);
        }
    }

    /** True when the peer closed: EOF or a reset, within the socket's read timeout. */
    private static boolean closedByPeer(Socket s) {
        try {
            InputStream in = s.getInputStream();
            byte[] b = new byte[4096];
            for (;;) {
                if (in.read(b) < 0) {
                    return true;
                }
            }
        } catch (java.net.SocketTimeoutException e) {
            return false;
        } catch (IOException reset) {
            return true;
        }
    }

    /** A good client's READ of {@code length} bytes at {@code offset}, checked byte for byte. */
    private static void assertServedByteForByte(TcpNode server, RdmaShuffleConf clientConf, MemoryRegion region,
                                                ByteBuffer content, int offset, int length) throws Exception {
        try (TcpNode client = new TcpNode(clientConf, NodeOptions.loopback())) {
            RdmaChannel ch = client.connect(server.localAddress());
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(length);
            try (MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK)) {
                CompletableFuture<Integer> done = new CompletableFuture<>();
                RegionDescriptor d = region.descriptor();
                ch.post(new ReadBatch(1).add(d.address() + offset, d.rkey(), length, sink, 0, 1),
                        (id, st, len) -> done.complete(st));
                assertEquals(ReadStatus.SUCCESS, done.get(20, TimeUnit.SECONDS));
                assertEquals(-1, sinkMem.clear().mismatch(content.duplicate().clear().position(offset)
                        .limit(offset + length)), "a good client's READ came back different");
            }
        }
    }

    @Test
    @Timeout(120)
    void shouldSendEachReadItsOwnBytesWhenAnotherConnectionReadsTheSameRegionWhileAReplyIsPending()
            throws Exception {
        RdmaShuffleConf conf = conf();
        ByteBuffer content = randomDirect(1, REGION_BYTES);
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback());
             TcpNode other = new TcpNode(conf, NodeOptions.loopback())) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ);
            RegionDescriptor d = a.descriptor();
            // Another connection READs 100-byte pieces of the same region all the while, checking each.
            AtomicBoolean stop = new AtomicBoolean();
            AtomicReference<String> otherError = new AtomicReference<>();
            Thread y = new Thread(() -> {
                try {
                    RdmaChannel ch = other.connect(server.localAddress());
                    ByteBuffer sinkMem = ByteBuffer.allocateDirect(100);
                    MemoryRegion sink = other.register(sinkMem, RegionAccess.READ_SINK);
                    SplittableRandom rnd = new SplittableRandom(2);
                    while (!stop.get()) {
                        int off = rnd.nextInt(REGION_BYTES - 100);
                        CompletableFuture<Integer> f = new CompletableFuture<>();
                        ch.post(new ReadBatch(1).add(d.address() + off, d.rkey(), 100, sink, 0, 0),
                                (id, st, len) -> f.complete(st));
                        if (f.get(20, TimeUnit.SECONDS) != ReadStatus.SUCCESS
                                || sinkMem.clear().mismatch(content.duplicate().position(off).limit(off + 100)) != -1) {
                            otherError.set("small READ at " + off + " came back wrong");
                            return;
                        }
                    }
                } catch (Exception e) {
                    otherError.set(e.toString());
                }
            });
            y.start();
            // This connection has a small receive window and drains slowly, so its replies stay pending.
            try (Socket x = rawConnect(server, 4096)) {
                DataInputStream in = handshake(x);
                OutputStream out = x.getOutputStream();
                int reads = 6;
                int length = 1_000_000;
                for (int k = 0; k < reads; k++) {
                    out.write(readFrame(k, d, k * 300_000L, length));
                }
                out.flush();
                byte[] chunk = new byte[16 << 10];
                for (int k = 0; k < reads; k++) {
                    assertEquals(Wire.OP_READ_REPLY, in.readByte());
                    assertEquals(ReadStatus.SUCCESS, in.readByte());
                    in.readShort();
                    assertEquals(k, in.readInt());
                    assertEquals(length, in.readInt());
                    for (int got = 0; got < length; ) {
                        int n = Math.min(chunk.length, length - got);
                        in.readFully(chunk, 0, n);
                        int at = k * 300_000 + got;
                        int m = ByteBuffer.wrap(chunk, 0, n).mismatch(content.duplicate().position(at).limit(at + n));
                        assertEquals(-1, m, "READ " + k + ": wrong payload from byte " + (got + m));
                        got += n;
                        Thread.sleep(2);
                    }
                }
            } finally {
                stop.set(true);
                y.join(30_000);
            }
            assertEquals(null, otherError.get());
        }
    }

    @Test
    @Timeout(120)
    void shouldCloseOnlyTheOffendingConnectionsWhenControlClaimsAreGiantOrTheirBodiesNeverArrive()
            throws Exception {
        RdmaShuffleConf conf = conf("maxControlMessageSize", "16m", "frameTimeout", "500ms");
        ByteBuffer content = randomDirect(3, REGION_BYTES);
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback().withControlHandler(r -> r))) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ);
            // A claim past the limit: a MALFORMED_REQUEST error reply, then the connection closes.
            try (Socket s = rawConnect(server, 0)) {
                DataInputStream in = handshake(s);
                s.getOutputStream().write(controlHeader(9, (16 << 20) + 1));
                assertEquals(Wire.OP_ERROR, in.readByte());
                assertEquals(ReadStatus.MALFORMED_REQUEST, in.readByte());
                in.readShort();
                assertEquals(9, in.readInt());
                assertEquals(0, in.readInt());
                assertTrue(closedByPeer(s), "connection stayed open after a claim past the limit");
            }
            // 100 claims of the full 16 MiB whose bodies never come (1.6 GB if allocated up front, in a
            // 2 GB test JVM), some with a few bytes of body: each is closed at the frame deadline.
            List<Socket> claims = new ArrayList<>();
            try {
                for (int i = 0; i < 100; i++) {
                    Socket s = rawConnect(server, 0);
                    claims.add(s);
                    handshake(s);
                    s.getOutputStream().write(controlHeader(i, 16 << 20));
                    if (i % 2 == 0) {
                        s.getOutputStream().write(new byte[1000]);
                    }
                }
                for (Socket s : claims) {
                    s.setSoTimeout(10_000);
                    assertTrue(closedByPeer(s), "an unfinished control body was not closed at the frame deadline");
                }
            } finally {
                for (Socket s : claims) {
                    s.close();
                }
            }
            await(() -> server.servedConnections() == 0, 10, "the offending connections are gone");
            assertServedByteForByte(server, conf, a, content, 12_345, 1 << 20);
        }
    }

    @Test
    @Timeout(180)
    void shouldRefuseConnectionsPastTheCapsCloseIdleOnesAndGiveEverythingBackAfterThousandsOfIdleAndHalfOpenOnes()
            throws Exception {
        // idleTimeout outlasts opening the attackers on a loaded machine (a full CI build beside it took more
        // than 3 s): handshaken idle connections must still be there when the cap is reached.
        RdmaShuffleConf conf = conf("maxConnections", "200", "maxHandshakingConnections", "50",
                "connectTimeout", "1s", "idleTimeout", "8s", "frameTimeout", "500ms");
        RdmaShuffleConf clientConf = conf("connectRetries", "20", "connectRetryWait", "250ms");
        ByteBuffer content = randomDirect(4, REGION_BYTES);
        // Warm up what the JVM keeps once used (NIO's temporary buffers, the nonce source), then measure.
        try (TcpNode warm = new TcpNode(conf, NodeOptions.loopback())) {
            MemoryRegion a = warm.register(content, RegionAccess.REMOTE_READ);
            assertServedByteForByte(warm, clientConf, a, content, 0, 1 << 20);
            try (Socket s = rawConnect(warm, 0)) {
                handshake(s);
            }
        }
        Thread.sleep(200);
        long directBefore = directMemoryUsed();
        long heapBefore = heapUsed();
        long fdsBefore = openFileDescriptors();
        int threadsBefore = Thread.activeCount();

        int attackers = Math.min(1500, (int) ((fileDescriptorLimit() - fdsBefore) / 3));
        assertTrue(attackers >= 300, "too few file descriptors for the test: limit " + fileDescriptorLimit());
        List<Socket> sockets = new ArrayList<>();
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback())) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ);
            int maxSeen = 0;
            try {
                for (int i = 0; i < attackers; i++) {
                    Socket s = rawConnect(server, 0);
                    sockets.add(s);
                    switch (i % 3) {
                        case 0 -> { } // connects, sends nothing
                        case 1 -> s.getOutputStream().write(helloAndAuth(), 0, 10); // half a HELLO
                        default -> s.getOutputStream().write(helloAndAuth()); // handshakes, then idles
                    }
                    maxSeen = Math.max(maxSeen, server.servedConnections());
                }
                assertTrue(maxSeen <= 200, "served " + maxSeen + " connections, cap 200");
                // Past the cap a newcomer is refused, or an older silent one is evicted to make room for it (which
                // of the two depends on how old the silent ones are by then, i.e. on the machine's load); both are
                // counted as the responder accepts, which may trail the connects.
                await(() -> server.connectionsRefused() + server.connectionsClosedByLimit() > 0, 20,
                        "nothing refused or evicted past the cap of 200 connections");
                // A good client still gets in (retrying past "busy") and is served byte for byte.
                assertServedByteForByte(server, clientConf, a, content, 777, 3 << 20);
                await(() -> server.servedConnections() == 0, 20, "idle and half-open connections closed ("
                        + server.servedConnections() + " left)");
                assertTrue(server.connectionsClosedByLimit() > 0);
            } finally {
                for (Socket s : sockets) {
                    s.close();
                }
            }
            assertServedByteForByte(server, clientConf, a, content, 1, 100);
        }
        await(() -> Thread.activeCount() <= threadsBefore, 10, "threads back to " + threadsBefore + " (now "
                + Thread.activeCount() + ")");
        await(() -> openFileDescriptors() <= fdsBefore + 2, 10, "file descriptors back to " + fdsBefore + " (now "
                + openFileDescriptors() + ")");
        await(() -> directMemoryUsed() <= directBefore + (1 << 20), 10, "direct memory back to " + directBefore
                + " bytes (now " + directMemoryUsed() + ")");
        await(() -> heapUsed() <= heapBefore + (32 << 20), 10, "heap back to " + heapBefore + " bytes (now "
                + heapUsed() + ")");
    }

    @Test
    @Timeout(60)
    void shouldLetAPeerThatHandshakesAtOnceInWhenSilentSocketsFillTheHandshakeCap() throws Exception {
        RdmaShuffleConf conf = conf("maxHandshakingConnections", "20");
        ByteBuffer content = randomDirect(9, REGION_BYTES);
        List<Socket> silent = new ArrayList<>();
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback())) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ);
            try {
                for (int i = 0; i < 100; i++) {
                    silent.add(rawConnect(server, 0)); // connect, never say HELLO
                }
                await(() -> server.servedConnections() == 20, 10, "20 silent sockets held ("
                        + server.servedConnections() + ")");
                Thread.sleep(300); // the silent ones are past the grace a fresh handshake gets
                // A client with default retries: the oldest silent socket makes room for it.
                assertServedByteForByte(server, conf(), a, content, 4321, 100_000);
                assertTrue(server.connectionsClosedByLimit() >= 1, "no silent socket was evicted");
            } finally {
                for (Socket s : silent) {
                    s.close();
                }
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldCloseAReaderThatTricklesOneReplyLongerThanTheIdleTimeout() throws Exception {
        ByteBuffer content = randomDirect(10, REGION_BYTES);
        try (TcpNode server = new TcpNode(conf("idleTimeout", "1s"), NodeOptions.loopback())) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ);
            try (Socket s = rawConnect(server, 4096)) {
                DataInputStream in = handshake(s);
                s.getOutputStream().write(readFrame(1, a.descriptor(), 0, 2_000_000));
                AtomicBoolean stop = new AtomicBoolean();
                Thread trickler = new Thread(() -> {
                    try {
                        while (!stop.get() && in.read() >= 0) { // one byte at a time
                            Thread.sleep(100);
                        }
                    } catch (IOException | InterruptedException e) {
                        // closed under it: that is the point
                    }
                });
                trickler.start();
                try {
                    await(() -> server.servedConnections() == 0, 15, "the trickling reader's connection closed");
                } finally {
                    stop.set(true);
                    s.close();
                    trickler.join(5000);
                }
            }
            assertEquals(1, server.connectionsClosedByLimit());
            assertServedByteForByte(server, conf(), a, content, 0, 2_000_000);
        }
    }

    @Test
    @Timeout(60)
    void shouldKeepServingAndCompletingWhenAHandlerOrAListenerThrowsAnError() throws Exception {
        RdmaShuffleConf conf = conf();
        ByteBuffer content = randomDirect(5, REGION_BYTES);
        NodeOptions serving = NodeOptions.loopback().withControlHandler(req -> {
            if (StandardCharsets.UTF_8.decode(req.duplicate()).toString().equals("oom")) {
                throw new OutOfMemoryError("simulated by the test");
            }
            return req;
        });
        try (TcpNode server = new TcpNode(conf, serving);
             TcpNode client = new TcpNode(conf, NodeOptions.loopback())) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ);
            RdmaChannel ch = client.connect(server.localAddress());
            ExecutionException e = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                    () -> ch.call(StandardCharsets.UTF_8.encode("oom")).get(10, TimeUnit.SECONDS));
            assertEquals(ReadStatus.HANDLER_FAILED, ((TransportException) e.getCause()).status());
            ByteBuffer echo = ch.call(StandardCharsets.UTF_8.encode("still there")).get(10, TimeUnit.SECONDS);
            assertEquals("still there", StandardCharsets.UTF_8.decode(echo).toString());

            // A listener that throws an Error costs its own completion only.
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(4096);
            MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK);
            RegionDescriptor d = a.descriptor();
            CompletableFuture<Integer> thrower = new CompletableFuture<>();
            ch.post(new ReadBatch(1).add(d.address(), d.rkey(), 4096, sink, 0, 1), (id, st, len) -> {
                thrower.complete(st);
                throw new OutOfMemoryError("simulated by the test");
            });
            assertEquals(ReadStatus.SUCCESS, thrower.get(10, TimeUnit.SECONDS));
            CompletableFuture<Integer> next = new CompletableFuture<>();
            ch.post(new ReadBatch(1).add(d.address() + 4096, d.rkey(), 4096, sink, 0, 2),
                    (id, st, len) -> next.complete(st));
            assertEquals(ReadStatus.SUCCESS, next.get(10, TimeUnit.SECONDS));
            assertEquals(-1, sinkMem.clear().mismatch(content.duplicate().position(4096).limit(8192)));
            assertTrue(ch.isOpen());
            assertEquals(null, client.failure());
            assertEquals(null, server.failure());
        }
    }

    @Test
    @Timeout(60)
    void shouldKeepAChannelInUseOpenWithKeepAlivesPastThePeersIdleTimeout() throws Exception {
        // The serving node closes connections silent for 1 s; the client counts a channel in use for 2.4 s
        // after its last post and sends a keep-alive whenever nothing moved for 0.8 s.
        ByteBuffer content = randomDirect(6, REGION_BYTES);
        try (TcpNode server = new TcpNode(conf("idleTimeout", "1s"), NodeOptions.loopback());
             TcpNode client = new TcpNode(conf("idleTimeout", "2400ms"), NodeOptions.loopback())) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ);
            RdmaChannel ch = client.connect(server.localAddress());
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(1000);
            MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK);
            RegionDescriptor d = a.descriptor();
            CompletableFuture<Integer> first = new CompletableFuture<>();
            ch.post(new ReadBatch(1).add(d.address(), d.rkey(), 1000, sink, 0, 1), (id, st, len) -> first.complete(st));
            assertEquals(ReadStatus.SUCCESS, first.get(10, TimeUnit.SECONDS));
            Thread.sleep(1800); // longer than the server's idle timeout, with nothing posted
            assertTrue(ch.isOpen(), "the channel was closed while in use");
            assertEquals(0, server.connectionsClosedByLimit(), "the server closed a channel kept alive");
            CompletableFuture<Integer> f = new CompletableFuture<>();
            ch.post(new ReadBatch(1).add(d.address() + 5, d.rkey(), 1000, sink, 0, 2), (id, st, len) -> f.complete(st));
            assertEquals(ReadStatus.SUCCESS, f.get(10, TimeUnit.SECONDS));
            assertEquals(-1, sinkMem.clear().mismatch(content.duplicate().position(5).limit(1005)));
        }
    }

    @Test
    @Timeout(60)
    void shouldCloseAnUnusedChannelFromItsOwnSideAndASilentPeerFromTheServingSide() throws Exception {
        RdmaShuffleConf conf = conf("idleTimeout", "1s");
        ByteBuffer content = randomDirect(8, REGION_BYTES);
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback());
             TcpNode client = new TcpNode(conf, NodeOptions.loopback())) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ);
            assertServedByteForByte(server, conf, a, content, 0, 1000);
            RdmaChannel ch = client.connect(server.localAddress());
            try (Socket silent = rawConnect(server, 0)) {
                handshake(silent);
                silent.setSoTimeout(10_000);
                assertTrue(closedByPeer(silent), "a handshaken connection with no traffic was not closed");
            }
            assertEquals(1, server.connectionsClosedByLimit());
            await(() -> !ch.isOpen(), 10, "the unused channel closes");
            await(() -> server.servedConnections() == 0, 10, "the serving side sees it go");
            assertEquals(1, server.connectionsClosedByLimit(), "the server, not the client, closed the unused channel");
            // A holder that posts to it afterwards is told to connect again.
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(100);
            MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK);
            RegionDescriptor d = a.descriptor();
            TransportException late = org.junit.jupiter.api.Assertions.assertThrows(TransportException.class,
                    () -> ch.post(new ReadBatch(1).add(d.address(), d.rkey(), 100, sink, 0, 1), (id, st, len) -> { }));
            assertEquals(ReadStatus.IDLE_CLOSED, late.status());
            RdmaChannel fresh = client.connect(server.localAddress());
            assertTrue(fresh != ch && fresh.isOpen());
            assertServedByteForByte(server, conf, a, content, 99, 5000);
            assertEquals(null, client.failure());
        }
    }

    @Test
    @Timeout(60)
    void shouldReportTheNodeFailedAndLetReadersFailFastWhenTheResponderLoopCannotGoOn() throws Exception {
        RdmaShuffleConf conf = conf("connectRetries", "0", "connectTimeout", "30s");
        ByteBuffer content = randomDirect(7, REGION_BYTES);
        long fdsBefore = openFileDescriptors();
        TcpNode server = new TcpNode(conf, NodeOptions.loopback());
        try (TcpNode client = new TcpNode(conf, NodeOptions.loopback())) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ);
            assertServedByteForByte(server, conf, a, content, 0, 4096);
            RdmaChannel ch = client.connect(server.localAddress());
            // Break the responder's loop itself (not one connection): its selector closes under it.
            java.lang.reflect.Field rf = TcpNode.class.getDeclaredField("responder");
            rf.setAccessible(true);
            java.lang.reflect.Field sf = TcpResponder.class.getDeclaredField("selector");
            sf.setAccessible(true);
            ((java.nio.channels.Selector) sf.get(rf.get(server))).close();
            await(() -> server.failure() != null, 10, "the node reports itself failed");
            await(() -> !ch.isOpen(), 10, "the served connection was closed, so its reader fails at once");
            // The listening socket is closed: refused at once, not left to the 30 s connect timeout.
            TransportException refused = org.junit.jupiter.api.Assertions.assertThrows(TransportException.class,
                    () -> client.connect(server.localAddress()));
            assertTrue(!refused.getMessage().contains("timed out"), refused.getMessage());
            TransportException own = org.junit.jupiter.api.Assertions.assertThrows(TransportException.class,
                    () -> server.connect(client.localAddress()));
            assertTrue(own.getMessage().contains("has failed"), own.getMessage());
        } finally {
            server.close();
        }
        await(() -> openFileDescriptors() <= fdsBefore + 2, 10, "file descriptors back to " + fdsBefore + " (now "
                + openFileDescriptors() + ")");
    }

    private static long directMemoryUsed() {
        System.gc();
        for (BufferPoolMXBean b : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
            if (b.getName().equals("direct")) {
                return b.getMemoryUsed();
            }
        }
        throw new IllegalStateException("no direct buffer pool bean");
    }

    private static long heapUsed() {
        System.gc();
        return ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed();
    }

    private static long openFileDescriptors() {
        try (var s = Files.list(Path.of("/proc/self/fd"))) {
            return s.count();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    private static long fileDescriptorLimit() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/limits"))) {
            if (line.startsWith("Max open files")) {
                return Long.parseLong(line.substring(26).trim().split("\\s+")[0]);
            }
        }
        return 1024;
    }
}
