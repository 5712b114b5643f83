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
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
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

    /** Answers "later" with a future put on {@code later} for the test to complete; anything else at once, echoed. */
    private static ControlHandler answeringLater(BlockingQueue<CompletableFuture<ByteBuffer>> later) {
        return org.rdmashuffle.transport.LaterReplies.handler(later, request -> request);
    }

    private static void readFully(SocketChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            if (ch.read(b) < 0) {
                throw new java.io.EOFException("closed by the node");
            }
        }
    }

    @Test
    @Timeout(120)
    void shouldAnswerWhatAPeerSentWhileItsControlReplyWasPendingInOrderAfterItAndReadNoMoreOfItMeanwhile()
            throws Exception {
        RdmaShuffleConf conf = conf();
        ByteBuffer content = randomDirect(8, REGION_BYTES);
        BlockingQueue<CompletableFuture<ByteBuffer>> later = new LinkedBlockingQueue<>();
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback().withControlHandler(answeringLater(later)));
             SocketChannel peer = SocketChannel.open(new InetSocketAddress("127.0.0.1", server.localAddress().port()))) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ);
            RegionDescriptor d = a.descriptor();
            peer.write(ByteBuffer.wrap(helloAndAuth()));
            ByteBuffer welcome = ByteBuffer.allocate(Wire.CHALLENGE_BYTES + Wire.WELCOME_BYTES);
            readFully(peer, welcome);
            assertEquals(Wire.HS_OK, welcome.getInt(Wire.CHALLENGE_BYTES));
            byte[] body = "later".getBytes(StandardCharsets.UTF_8);
            peer.write(ByteBuffer.wrap(controlHeader(0, body.length)));
            peer.write(ByteBuffer.wrap(body));
            CompletableFuture<ByteBuffer> pending = later.poll(30, TimeUnit.SECONDS);
            assertTrue(pending != null, "the handler was not asked");
            long servedBefore = server.stats().readsServed();

            // READs of one byte each, pipelined behind the pending control message until the socket takes no more:
            // the node reads one input buffer of them and then nothing, so the kernel's buffers fill.
            peer.configureBlocking(false);
            ByteBuffer frames = ByteBuffer.allocate(64 << 10).limit(0);
            long frameCount = 0;
            long sent = 0;
            for (;;) {
                if (!frames.hasRemaining()) {
                    frames.clear();
                    while (frames.remaining() >= Wire.REQUEST_HEADER_BYTES) {
                        frameCount++;
                        frames.put(readFrame((int) frameCount, d, frameCount * 7919 % REGION_BYTES, 1));
                    }
                    frames.flip();
                }
                int n = peer.write(frames);
                sent += n;
                if (n == 0) {
                    break;
                }
                assertTrue(sent < (256L << 20), "the node kept reading a connection whose control reply is pending");
            }
            long whole = sent / Wire.REQUEST_HEADER_BYTES; // the frame cut by the full socket is finished below

            // Another connection is served meanwhile; none of the waiting one's READs was.
            assertServedByteForByte(server, conf, a, content, 12_345, 1 << 20);
            assertEquals(servedBefore + 1, server.stats().readsServed(), "a READ sent after the control message was "
                    + "served before its reply");

            pending.complete(StandardCharsets.UTF_8.encode("answered later"));
            peer.configureBlocking(true);
            if (sent % Wire.REQUEST_HEADER_BYTES != 0) {
                frames.limit(frames.position() + (int) (Wire.REQUEST_HEADER_BYTES - sent % Wire.REQUEST_HEADER_BYTES));
                while (frames.hasRemaining()) {
                    peer.write(frames);
                }
                whole++;
            }
            DataInputStream in = new DataInputStream(new java.io.BufferedInputStream(
                    java.nio.channels.Channels.newInputStream(peer), 1 << 16));
            assertEquals(Wire.OP_CONTROL_REPLY, in.readByte(), "the control reply comes first");
            assertEquals(ReadStatus.SUCCESS, in.readByte());
            in.readShort();
            assertEquals(0, in.readInt());
            byte[] reply = new byte[in.readInt()];
            in.readFully(reply);
            assertEquals("answered later", new String(reply, StandardCharsets.UTF_8));
            for (long i = 1; i <= whole; i++) {
                assertEquals(Wire.OP_READ_REPLY, in.readByte());
                assertEquals(ReadStatus.SUCCESS, in.readByte());
                in.readShort();
                assertEquals((int) i, in.readInt(), "replies in request order");
                assertEquals(1, in.readInt());
                assertEquals(content.get((int) (i * 7919 % REGION_BYTES)), in.readByte());
            }
            assertTrue(whole > TcpResponder.IN_BUFFER_BYTES / Wire.REQUEST_HEADER_BYTES,
                    "the peer was held back before it sent more than the node's input buffer: " + whole + " READs");
            assertEquals(null, server.failure());
        }
    }

    @Test
    @Timeout(60)
    void shouldDropAPendingControlReplyWhenItsConnectionOrTheNodeClosesFirstAndGoOnServing() throws Exception {
        RdmaShuffleConf conf = conf();
        ByteBuffer content = randomDirect(9, REGION_BYTES);
        BlockingQueue<CompletableFuture<ByteBuffer>> later = new LinkedBlockingQueue<>();
        // What the nodes log meanwhile (slf4j-simple writes to System.err as it is when a line is logged).
        java.io.PrintStream err = System.err;
        java.io.ByteArrayOutputStream logged = new java.io.ByteArrayOutputStream();
        System.setErr(new java.io.PrintStream(logged, true, StandardCharsets.UTF_8));
        TcpNode server = new TcpNode(conf, NodeOptions.loopback().withControlHandler(answeringLater(later)));
        try (TcpNode waiting = new TcpNode(conf, NodeOptions.loopback())) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ);
            CompletableFuture<ByteBuffer> dropped;
            CompletableFuture<ByteBuffer> orphan;
            try (TcpNode gone = new TcpNode(conf, NodeOptions.loopback())) {
                dropped = gone.connect(server.localAddress()).call(StandardCharsets.UTF_8.encode("later"));
                orphan = later.poll(30, TimeUnit.SECONDS);
                assertTrue(orphan != null, "the handler was not asked");
            }
            ExecutionException e = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                    () -> dropped.get(30, TimeUnit.SECONDS));
            assertEquals(ReadStatus.CHANNEL_CLOSED, ((TransportException) e.getCause()).status());
            await(() -> server.servedConnections() == 0, 10, "a connection closed while its reply was pending is gone");
            assertTrue(orphan.complete(ByteBuffer.allocateDirect(4096)), "the reply of a closed connection");
            assertServedByteForByte(server, conf, a, content, 4096, 1 << 20);
            assertEquals(0, server.connectionsClosedByLimit());

            // The node closes with a reply pending: its peer hears at once, and the late completion touches nothing.
            CompletableFuture<ByteBuffer> unanswered = waiting.connect(server.localAddress())
                    .call(StandardCharsets.UTF_8.encode("later"));
            CompletableFuture<ByteBuffer> late = later.poll(30, TimeUnit.SECONDS);
            assertTrue(late != null, "the handler was not asked");
            assertEquals(null, server.failure());
            server.close();
            e = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                    () -> unanswered.get(30, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof TransportException, String.valueOf(e.getCause()));
            assertTrue(late.complete(StandardCharsets.UTF_8.encode("too late")));
        } finally {
            server.close();
            System.setErr(err);
            err.print(logged.toString(StandardCharsets.UTF_8));
        }
        String lines = logged.toString(StandardCharsets.UTF_8).lines()
                .filter(l -> !l.contains("this JVM did not run for about")) // a pause of this JVM (Pauses), not ours
                .collect(java.util.stream.Collectors.joining("\n"));
        assertTrue(!lines.contains("] WARN ") && !lines.contains("] ERROR "), "a dropped reply was logged: " + lines);
    }

    @Test
    @Timeout(60)
    void shouldCloseAConnectionWhoseControlReplyTheHandlerNeverGivesAtTheIdleTimeout() throws Exception {
        RdmaShuffleConf conf = conf("idleTimeout", "1s");
        BlockingQueue<CompletableFuture<ByteBuffer>> later = new LinkedBlockingQueue<>();
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback().withControlHandler(answeringLater(later)));
             TcpNode client = new TcpNode(conf(), NodeOptions.loopback())) {
            CompletableFuture<ByteBuffer> never = client.connect(server.localAddress())
                    .call(StandardCharsets.UTF_8.encode("later"));
            assertTrue(later.poll(30, TimeUnit.SECONDS) != null, "the handler was not asked");
            ExecutionException e = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                    () -> never.get(30, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof TransportException, String.valueOf(e.getCause()));
            await(() -> server.servedConnections() == 0, 10, "the connection is gone");
            assertEquals(1, server.connectionsClosedByLimit());
        }
    }

    @Test
    @Timeout(60)
    void shouldSendALaterReplyPastTheInlineSizeWholeAndOnePastTheControlLimitAsHandlerFailed() throws Exception {
        RdmaShuffleConf conf = conf("maxControlMessageSize", "16k");
        BlockingQueue<CompletableFuture<ByteBuffer>> later = new LinkedBlockingQueue<>();
        try (TcpNode server = new TcpNode(conf, NodeOptions.loopback().withControlHandler(answeringLater(later)));
             TcpNode client = new TcpNode(conf, NodeOptions.loopback())) {
            RdmaChannel ch = client.connect(server.localAddress());
            ByteBuffer large = randomDirect(10, 12_000); // past the 8 KiB copied next to its header
            CompletableFuture<ByteBuffer> first = ch.call(StandardCharsets.UTF_8.encode("later"));
            later.poll(30, TimeUnit.SECONDS).complete(large);
            ByteBuffer got = first.get(30, TimeUnit.SECONDS);
            assertEquals(-1, got.mismatch(large.duplicate().clear()), "a later reply of 12,000 bytes");
            CompletableFuture<ByteBuffer> tooLarge = ch.call(StandardCharsets.UTF_8.encode("later"));
            later.poll(30, TimeUnit.SECONDS).complete(ByteBuffer.allocate((16 << 10) + 1));
            ExecutionException e = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                    () -> tooLarge.get(30, TimeUnit.SECONDS));
            assertEquals(ReadStatus.HANDLER_FAILED, ((TransportException) e.getCause()).status());
            assertEquals("still there", StandardCharsets.UTF_8.decode(ch.call(StandardCharsets.UTF_8.encode(
                    "still there")).get(30, TimeUnit.SECONDS)).toString());
            assertTrue(ch.isOpen());
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
