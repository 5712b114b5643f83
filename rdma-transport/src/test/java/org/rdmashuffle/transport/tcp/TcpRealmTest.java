package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.Realms;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/**
 * Realms on the tcp provider: a node with a secret per realm (one NodeManager serving many jobs, each
 * with its own job token) over real loopback sockets. A connection names its realm and proves its secret,
 * READs only its realm's regions (any other rkey is answered as an unknown one), and its control messages
 * reach the handler with its realm; every refusal says why on the client.
 */
class TcpRealmTest {
    private static final String A = "job_1700000000000_0001";
    private static final String B = "job_1700000000000_0002";
    private static final byte[] SECRET_A = "token-of-job-0001".getBytes(StandardCharsets.UTF_8);
    private static final byte[] SECRET_B = "token-of-job-0002".getBytes(StandardCharsets.UTF_8);
    private static final int REGION_BYTES = 256 << 10;

    /** The server's secrets: a test removes a realm as a finished job's would be. */
    private final Map<String, byte[]> secrets = new ConcurrentHashMap<>(Map.of(A, SECRET_A, B, SECRET_B));

    private static RdmaShuffleConf conf() {
        return new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp"));
    }

    /** The honest peer's settings in the lock-out test: default retries, 3 s per attempt and between them. */
    private static RdmaShuffleConf honestConf() {
        return new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.connectTimeout", "3s", "spark.shuffle.rdma.connectRetryWait", "3s"));
    }

    private NodeOptions serverOptions() {
        return NodeOptions.loopback().withSecrets(secrets::get);
    }

    private static NodeOptions clientOf(String realm, byte[] secret) {
        return NodeOptions.loopback().withRealm(realm, secret);
    }

    /** One READ of {@code length} bytes at {@code offset} of {@code d} into {@code sink}; its status. */
    private static int read(RdmaChannel ch, RegionDescriptor d, long offset, int length, MemoryRegion sink)
            throws Exception {
        CompletableFuture<Integer> done = new CompletableFuture<>();
        ch.post(new ReadBatch(1).add(d.address() + offset, d.rkey(), length, sink, 0, 1),
                (id, status, len) -> done.complete(len == (status == ReadStatus.SUCCESS ? length : 0) ? status : -2));
        return done.get(20, TimeUnit.SECONDS);
    }

    /** READs {@code length} bytes at {@code offset} of {@code d} and checks they are {@code content}'s. */
    private static void readAndCheck(RdmaChannel ch, RegionDescriptor d, ByteBuffer content, int offset, int length,
                                     MemoryRegion sink, ByteBuffer sinkMemory) throws Exception {
        for (int k = 0; k < length; k++) {
            sinkMemory.put(k, (byte) ~content.get(offset + k)); // stale bytes never pass
        }
        assertEquals(ReadStatus.SUCCESS, read(ch, d, offset, length, sink));
        assertEquals(-1, sinkMemory.duplicate().clear().limit(length)
                .mismatch(content.duplicate().clear().position(offset).limit(offset + length)), "bytes differ");
    }

    private static TransportException refusedConnect(NodeOptions client, TcpNode server) {
        try (TcpNode c = new TcpNode(conf(), client)) {
            return assertThrows(TransportException.class, () -> c.connect(server.localAddress()));
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }

    @Test
    @Timeout(60)
    void shouldReadItsRealmsRegionsByteForByteWhenTheClientProvesItsRealmsSecret(@TempDir Path dir) throws Exception {
        ByteBuffer content = TcpAttacks.content(1, REGION_BYTES);
        Path file = dir.resolve("map-output.data");
        byte[] fileBytes = new byte[REGION_BYTES];
        new SplittableRandom(2).nextBytes(fileBytes);
        Files.write(file, fileBytes);
        try (TcpNode server = new TcpNode(conf(), serverOptions());
             TcpNode client = new TcpNode(conf(), clientOf(A, SECRET_A))) {
            MemoryRegion region = server.register(content, RegionAccess.REMOTE_READ, A);
            MemoryRegion mapped = server.registerFile(file, 4096, 64 << 10, A);
            ByteBuffer sinkMemory = ByteBuffer.allocateDirect(REGION_BYTES);
            MemoryRegion sink = client.register(sinkMemory, RegionAccess.READ_SINK);
            RdmaChannel ch = client.connect(server.localAddress());

            readAndCheck(ch, region.descriptor(), content, 0, REGION_BYTES, sink, sinkMemory);
            readAndCheck(ch, region.descriptor(), content, 12_345, 100, sink, sinkMemory);
            ByteBuffer fileContent = ByteBuffer.wrap(fileBytes, 4096, 64 << 10).slice();
            readAndCheck(ch, mapped.descriptor(), fileContent, 0, 64 << 10, sink, sinkMemory);
            assertEquals(3, server.stats().readsServed());
            assertEquals(0, server.stats().connectionsRefused());
        }
    }

    @Test
    @Timeout(60)
    void shouldAnswerAnotherRealmsValidRkeyExactlyAsAnUnknownRkey() throws Exception {
        ByteBuffer contentA = TcpAttacks.content(3, REGION_BYTES);
        ByteBuffer contentB = TcpAttacks.content(4, REGION_BYTES);
        try (TcpNode server = new TcpNode(conf(), serverOptions());
             TcpNode client = new TcpNode(conf(), clientOf(A, SECRET_A))) {
            MemoryRegion a = server.register(contentA, RegionAccess.REMOTE_READ, A);
            MemoryRegion b = server.register(contentB, RegionAccess.REMOTE_READ, B);
            MemoryRegion noRealm = server.register(TcpAttacks.content(5, 4096), RegionAccess.REMOTE_READ);
            MemoryRegion sinkOfB = server.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK, B);
            MemoryRegion gone = server.register(ByteBuffer.allocateDirect(4096), RegionAccess.REMOTE_READ, A);
            RegionDescriptor stale = gone.descriptor();
            gone.close();
            ByteBuffer sinkMemory = ByteBuffer.allocateDirect(REGION_BYTES);
            MemoryRegion sink = client.register(sinkMemory, RegionAccess.READ_SINK);
            RdmaChannel ch = client.connect(server.localAddress());

            long refusedBefore = server.stats().readsRefused();
            assertEquals(ReadStatus.UNKNOWN_KEY, read(ch, stale, 0, 100, sink), "the reference: a stale rkey");
            // B's region, in bounds and out of them; a region of no realm; B's READ sink: each is answered as the
            // stale rkey is, before any check that would tell the region exists (bounds, access).
            assertEquals(ReadStatus.UNKNOWN_KEY, read(ch, b.descriptor(), 0, 100, sink));
            assertEquals(ReadStatus.UNKNOWN_KEY, read(ch, b.descriptor(), REGION_BYTES - 10, 100, sink));
            assertEquals(ReadStatus.UNKNOWN_KEY, read(ch, noRealm.descriptor(), 0, 100, sink));
            assertEquals(ReadStatus.UNKNOWN_KEY, read(ch, sinkOfB.descriptor(), 0, 100, sink));
            assertEquals(refusedBefore + 5, server.stats().readsRefused(), "each counted as a refused READ");
            assertEquals(0, server.stats().readsServed());
            // The channel goes on, and its own realm's region still reads.
            assertTrue(ch.isOpen());
            readAndCheck(ch, a.descriptor(), contentA, 777, 4096, sink, sinkMemory);

            // On the wire, byte for byte: the reply to B's rkey is the reply to the stale one.
            try (Socket s = rawConnect(server)) {
                assertArrayEquals(new int[] {Wire.HS_OK, Wire.HS_OK},
                        realmHandshake(s, helloField(A), SECRET_A, Wire.VERSION));
                byte[] toStale = rawRead(s, 9, stale, 0, 100);
                assertArrayEquals(toStale, rawRead(s, 9, b.descriptor(), 0, 100));
                assertArrayEquals(toStale, rawRead(s, 9, b.descriptor(), REGION_BYTES - 10, 100));
                assertArrayEquals(toStale, rawRead(s, 9, noRealm.descriptor(), 0, 100));
                assertArrayEquals(toStale, rawRead(s, 9, sinkOfB.descriptor(), 0, 100));
                assertEquals(ReadStatus.UNKNOWN_KEY, toStale[1]);
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldRefuseAWrongSecretSayingAuthenticationFailedForTheRealm() throws Exception {
        try (TcpNode server = new TcpNode(conf(), serverOptions())) {
            server.register(TcpAttacks.content(6, 4096), RegionAccess.REMOTE_READ, A);
            TransportException e = refusedConnect(clientOf(A, SECRET_B), server);
            assertTrue(e.getMessage().contains("authentication failed for realm " + A), e.getMessage());
            assertEquals(1, server.connectionsRefused(), "counted as a refused handshake");
            assertEquals(0, server.stats().readsServed());
        }
    }

    @Test
    @Timeout(60)
    void shouldAnswerAnUnknownRealmExactlyAsAWrongSecretWhileTheNodesLogTellsThemApart() throws Exception {
        PrintStream err = System.err;
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        System.setErr(new PrintStream(log, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err
        try (TcpNode server = new TcpNode(conf(), serverOptions())) {
            server.register(TcpAttacks.content(6, 4096), RegionAccess.REMOTE_READ, A);
            TransportException unknown = refusedConnect(clientOf("job_1700000000000_0099", SECRET_A), server);
            TransportException wrong = refusedConnect(clientOf(A, SECRET_B), server);
            // The client is told the same thing both ways: it cannot learn which jobs the node knows.
            assertTrue(unknown.getMessage().contains("authentication failed for realm job_1700000000000_0099: unknown "
                    + "job or wrong secret"), unknown.getMessage());
            assertTrue(wrong.getMessage().contains("authentication failed for realm " + A + ": unknown job or wrong "
                    + "secret"), wrong.getMessage());
            assertEquals(2, server.connectionsRefused());
            // On the wire, byte for byte: an OK challenge, then the same WELCOME (status 3, a proof of zeros).
            byte[] ofUnknown;
            byte[] ofWrongSecret;
            try (Socket s = rawConnect(server)) {
                ofUnknown = realmWelcome(s, helloField("job_1700000000000_0099"), SECRET_A);
            }
            try (Socket s = rawConnect(server)) {
                ofWrongSecret = realmWelcome(s, helloField(A), SECRET_B);
            }
            assertEquals(Wire.HS_AUTH_FAILED, ByteBuffer.wrap(ofUnknown).getInt());
            assertArrayEquals(ofWrongSecret, ofUnknown);
        } finally {
            System.setErr(err);
        }
        // The operator's log still says which it was (rate-limited: the first refusal of each node's window).
        String lines = log.toString(StandardCharsets.UTF_8);
        assertTrue(lines.contains("unknown realm (or its job finished): answered as a failed authentication (realm "
                + "job_1700000000000_0099)"), lines);
    }

    @Test
    @Timeout(60)
    void shouldRefuseAClientThatNamesNoRealmWhenTheNodeKeepsSecretsPerRealm() throws Exception {
        try (TcpNode server = new TcpNode(conf(), serverOptions())) {
            server.register(TcpAttacks.content(7, 4096), RegionAccess.REMOTE_READ, A);
            // Neither with a secret (even a realm's) nor without one.
            TransportException withSecret = refusedConnect(NodeOptions.loopback().withSecret(SECRET_A), server);
            assertTrue(withSecret.getMessage().contains("the peer keeps a secret per realm (job), and the connection "
                    + "named no realm"), withSecret.getMessage());
            TransportException without = refusedConnect(NodeOptions.loopback(), server);
            assertTrue(without.getMessage().contains("named no realm"), without.getMessage());
            assertEquals(2, server.connectionsRefused());
        }
    }

    @Test
    @Timeout(60)
    void shouldRefuseAClientThatNamesARealmWhenTheNodeKeepsOneSecret() throws Exception {
        try (TcpNode server = new TcpNode(conf(), NodeOptions.loopback().withSecret(SECRET_A))) {
            TransportException e = refusedConnect(clientOf(A, SECRET_A), server);
            assertTrue(e.getMessage().contains("the peer keeps no secrets per realm (job), and this node named realm "
                    + A), e.getMessage());
            assertEquals(1, server.connectionsRefused());
        }
    }

    @Test
    @Timeout(60)
    void shouldGiveTheControlHandlerTheRealmItsConnectionAuthenticatedFor() throws Exception {
        ControlHandler realmEcho = new ControlHandler() {
            @Override
            public ByteBuffer onMessage(ByteBuffer request) {
                throw new AssertionError("the node calls the handler with the connection's realm");
            }

            @Override
            public ByteBuffer onMessage(String realm, ByteBuffer request) {
                byte[] body = new byte[request.remaining()];
                request.get(body);
                return ByteBuffer.wrap((realm + ":" + new String(body, StandardCharsets.UTF_8))
                        .getBytes(StandardCharsets.UTF_8));
            }
        };
        try (TcpNode server = new TcpNode(conf(), serverOptions().withControlHandler(realmEcho));
             TcpNode plain = new TcpNode(conf(), NodeOptions.loopback().withControlHandler(realmEcho));
             TcpNode clientA = new TcpNode(conf(), clientOf(A, SECRET_A));
             TcpNode clientB = new TcpNode(conf(), clientOf(B, SECRET_B));
             TcpNode clientNone = new TcpNode(conf(), NodeOptions.loopback())) {
            assertEquals(A + ":hi", call(clientA.connect(server.localAddress()), "hi"));
            assertEquals(B + ":hi", call(clientB.connect(server.localAddress()), "hi"));
            assertEquals("null:hi", call(clientNone.connect(plain.localAddress()), "hi"), "no realm on a plain node");
        }
    }

    private static String call(RdmaChannel ch, String message) throws Exception {
        ByteBuffer reply = ch.call(ByteBuffer.wrap(message.getBytes(StandardCharsets.UTF_8))).get(20, TimeUnit.SECONDS);
        byte[] b = new byte[reply.remaining()];
        reply.get(b);
        return new String(b, StandardCharsets.UTF_8);
    }

    @Test
    @Timeout(120)
    void shouldLetTwoRealmsOnOneNodeAtOnceEachReadOnlyItsOwnRegions() throws Exception {
        ByteBuffer contentA = TcpAttacks.content(8, REGION_BYTES);
        ByteBuffer contentB = TcpAttacks.content(9, REGION_BYTES);
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try (TcpNode server = new TcpNode(conf(), serverOptions());
             TcpNode clientA = new TcpNode(conf(), clientOf(A, SECRET_A));
             TcpNode clientB = new TcpNode(conf(), clientOf(B, SECRET_B))) {
            RegionDescriptor a = server.register(contentA, RegionAccess.REMOTE_READ, A).descriptor();
            RegionDescriptor b = server.register(contentB, RegionAccess.REMOTE_READ, B).descriptor();
            Future<long[]> ofA = pool.submit(() -> readMany(clientA, server, a, contentA, b, 10));
            Future<long[]> ofB = pool.submit(() -> readMany(clientB, server, b, contentB, a, 11));
            long[] ra = ofA.get(90, TimeUnit.SECONDS);
            long[] rb = ofB.get(90, TimeUnit.SECONDS);
            assertEquals(ra[0] + rb[0], server.stats().readsServed(), "every own READ served");
            assertEquals(ra[1] + rb[1], server.stats().readsRefused(), "every READ of the other realm refused");
        } finally {
            pool.shutdownNow();
        }
    }

    /**
     * 300 READs of its own region at random places, byte for byte, and every tenth one of the other realm's
     * region (refused as an unknown rkey); {own READs, other READs}.
     */
    private static long[] readMany(TcpNode client, TcpNode server, RegionDescriptor own, ByteBuffer content,
                                   RegionDescriptor other, long seed) throws Exception {
        SplittableRandom rnd = new SplittableRandom(seed);
        ByteBuffer sinkMemory = ByteBuffer.allocateDirect(64 << 10);
        long owns = 0;
        long others = 0;
        try (MemoryRegion sink = client.register(sinkMemory, RegionAccess.READ_SINK)) {
            RdmaChannel ch = client.connect(server.localAddress());
            for (int i = 0; i < 300; i++) {
                int length = 1 + rnd.nextInt(64 << 10);
                int offset = rnd.nextInt(REGION_BYTES - length + 1);
                readAndCheck(ch, own, content, offset, length, sink, sinkMemory);
                owns++;
                if (i % 10 == 0) {
                    assertEquals(ReadStatus.UNKNOWN_KEY, read(ch, other, offset, length, sink));
                    others++;
                }
            }
        }
        return new long[] {owns, others};
    }

    @Test
    @Timeout(60)
    void shouldRefuseNewConnectionsOfARealmOnceTheResolverNoLongerKnowsIt() throws Exception {
        ByteBuffer content = TcpAttacks.content(12, REGION_BYTES);
        try (TcpNode server = new TcpNode(conf(), serverOptions());
             TcpNode before = new TcpNode(conf(), clientOf(A, SECRET_A))) {
            RegionDescriptor a = server.register(content, RegionAccess.REMOTE_READ, A).descriptor();
            ByteBuffer sinkMemory = ByteBuffer.allocateDirect(4096);
            MemoryRegion sink = before.register(sinkMemory, RegionAccess.READ_SINK);
            RdmaChannel authenticated = before.connect(server.localAddress());
            readAndCheck(authenticated, a, content, 0, 4096, sink, sinkMemory);

            secrets.remove(A); // the job finished
            TransportException e = refusedConnect(clientOf(A, SECRET_A), server);
            assertTrue(e.getMessage().contains("authentication failed for realm " + A
                    + ": unknown job or wrong secret"), e.getMessage());
            // A connection authenticated before stays (its regions go when the job's owner closes them).
            readAndCheck(authenticated, a, content, 4096, 4096, sink, sinkMemory);

            secrets.put(A, SECRET_A); // known again: the resolver is asked at every handshake
            try (TcpNode after = new TcpNode(conf(), clientOf(A, SECRET_A))) {
                ByteBuffer m = ByteBuffer.allocateDirect(4096);
                readAndCheck(after.connect(server.localAddress()), a, content, 8192, 4096,
                        after.register(m, RegionAccess.READ_SINK), m);
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldServeEveryRegionAsBeforeWhenTheNodeKeepsNoSecretsPerRealm() throws Exception {
        ByteBuffer ofA = TcpAttacks.content(13, REGION_BYTES);
        ByteBuffer ofNone = TcpAttacks.content(14, REGION_BYTES);
        try (TcpNode server = new TcpNode(conf(), NodeOptions.loopback().withSecret(SECRET_A));
             TcpNode client = new TcpNode(conf(), NodeOptions.loopback().withSecret(SECRET_A))) {
            RegionDescriptor a = server.register(ofA, RegionAccess.REMOTE_READ, A).descriptor();
            RegionDescriptor none = server.register(ofNone, RegionAccess.REMOTE_READ).descriptor();
            ByteBuffer sinkMemory = ByteBuffer.allocateDirect(8192);
            MemoryRegion sink = client.register(sinkMemory, RegionAccess.READ_SINK);
            RdmaChannel ch = client.connect(server.localAddress());
            readAndCheck(ch, a, ofA, 100, 8192, sink, sinkMemory);
            readAndCheck(ch, none, ofNone, 100, 8192, sink, sinkMemory);
        }
    }

    @Test
    @Timeout(60)
    void shouldConnectWithTheLongestRealmAndRejectLongerOrEmptyOnes() throws Exception {
        String longest = "é".repeat(Realms.MAX_BYTES / 2); // 128 bytes of UTF-8 in 64 characters
        secrets.put(longest, SECRET_A);
        ByteBuffer content = TcpAttacks.content(15, 4096);
        try (TcpNode server = new TcpNode(conf(), serverOptions());
             TcpNode client = new TcpNode(conf(), clientOf(longest, SECRET_A))) {
            RegionDescriptor d = server.register(content, RegionAccess.REMOTE_READ, longest).descriptor();
            ByteBuffer m = ByteBuffer.allocateDirect(4096);
            readAndCheck(client.connect(server.localAddress()), d, content, 0, 4096,
                    client.register(m, RegionAccess.READ_SINK), m);
        }
        String tooLong = "€".repeat(43); // 129 bytes
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> clientOf(tooLong, SECRET_A));
        assertTrue(e.getMessage().contains("has 129 bytes in UTF-8; at most 128"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> clientOf("", SECRET_A));
        IllegalArgumentException noSecret = assertThrows(IllegalArgumentException.class,
                () -> NodeOptions.loopback().withRealm(A, null));
        assertTrue(noSecret.getMessage().contains("has no secret"), noSecret.getMessage());
        try (TcpNode server = new TcpNode(conf(), serverOptions())) {
            assertThrows(IllegalArgumentException.class,
                    () -> server.register(ByteBuffer.allocateDirect(64), RegionAccess.REMOTE_READ, tooLong));
        }
    }

    @Test
    @Timeout(60)
    void shouldRefuseAHelloWhoseRealmFieldIsMalformedAsABadVersion() throws Exception {
        try (TcpNode server = new TcpNode(conf(), serverOptions())) {
            byte[] utf8 = A.getBytes(StandardCharsets.UTF_8);
            byte[][] malformed = {
                {0}, // an empty realm
                lengthPrefixed((byte) 129, new byte[129]), // longer than the longest
                lengthPrefixed((byte) 2, new byte[] {(byte) 0xC3, (byte) 0x28}), // not UTF-8
            };
            for (byte[] field : malformed) {
                try (Socket s = rawConnect(server)) {
                    assertEquals(Wire.HS_BAD_VERSION, realmHandshake(s, field, SECRET_A, Wire.VERSION)[0]);
                }
            }
            try (Socket s = rawConnect(server)) { // version 2 has no realm field
                assertEquals(Wire.HS_BAD_VERSION,
                        realmHandshake(s, lengthPrefixed((byte) utf8.length, utf8), SECRET_A,
                                Wire.VERSION_WITHOUT_REALM)[0]);
            }
            assertEquals(4, server.connectionsRefused());
        }
    }

    @Test
    @Timeout(120)
    void shouldLetAnHonestRealmPeerInAtOnceWhenItsOwnHostHoldsManyRefusedHandshakes() throws Exception {
        // A process on the honest peer's own host (the same source address) without any realm's secret opens
        // 300 connections naming an unknown realm or a known one with a wrong proof, reads the refusal and keeps
        // each open: refused handshakes hold no slot, and the address's cap makes room by resetting them.
        ByteBuffer content = TcpAttacks.content(16, REGION_BYTES);
        RdmaShuffleConf conf = conf();
        try (TcpNode server = new TcpNode(conf, serverOptions())) {
            MemoryRegion a = server.register(content, RegionAccess.REMOTE_READ, A);
            List<Socket> held = new ArrayList<>();
            InetAddress sameHost = InetAddress.getByName("127.0.0.1");
            InetSocketAddress target = new InetSocketAddress("127.0.0.1", server.localAddress().port());
            try {
                int refused = 0;
                for (int i = 0; i < 300; i++) {
                    Socket s = TcpAttacks.open(target, sameHost, 5000);
                    held.add(s);
                    String realm = i % 2 == 0 ? "job_1700000000000_" + (1000 + i) : A;
                    int[] st = realmHandshake(s, helloField(realm), SECRET_B, Wire.VERSION);
                    if (st[1] == Wire.HS_AUTH_FAILED) {
                        refused++;
                    }
                }
                assertTrue(refused >= 128, "the refusals did not take: " + refused);
                TcpAttacks.HonestResult r = TcpAttacks.honestRead(honestConf(), clientOf(A, SECRET_A),
                        server.localAddress(), a.descriptor(), content, 99, 64 << 10, 2, 20_000);
                assertTrue(r.connectMs() < 3000, "the honest peer needed more than one connect attempt: " + r);
                assertTrue(server.connectionsRefused() >= refused, "refusals not counted: " + server.connectionsRefused());
                assertTrue(server.servedConnections() <= conf.maxConnectionsPerAddress(),
                        "the address holds more than its cap: " + server.servedConnections());
            } finally {
                for (Socket s : held) {
                    s.close();
                }
            }
            assertNull(server.failure());
        }
    }

    // ---- raw wire, written to docs/wire-format.md ----

    private static Socket rawConnect(TcpNode server) throws IOException {
        Socket s = new Socket();
        s.connect(new InetSocketAddress("127.0.0.1", server.localAddress().port()), 5000);
        s.setSoTimeout(20_000);
        return s;
    }

    private static byte[] lengthPrefixed(byte length, byte[] bytes) {
        return ByteBuffer.allocate(1 + bytes.length).put(length).put(bytes).array();
    }

    /** The HELLO's realm field for {@code realm}: its length, then its UTF-8. */
    private static byte[] helloField(String realm) {
        byte[] utf8 = realm.getBytes(StandardCharsets.UTF_8);
        return lengthPrefixed((byte) utf8.length, utf8);
    }

    /**
     * A HELLO of {@code version} naming a realm with the raw field {@code realmField} (and, of version 4, the
     * address {@code s} dialled), then (if the CHALLENGE says ok) the proof of {@code secret} bound to the realm and
     * the address; {challenge status, welcome status or -1}.
     */
    private static int[] realmHandshake(Socket s, byte[] realmField, byte[] secret, short version) throws IOException {
        byte[] clientNonce = Handshake.nonce();
        byte[] address = version == Wire.VERSION ? TcpAttacks.dialled(s) : null;
        byte[] serverNonce = new byte[Wire.NONCE_BYTES];
        int status = sendHello(s, realmField, version, clientNonce, address, serverNonce);
        if (status != Wire.HS_OK) {
            return new int[] {status, -1};
        }
        byte[] welcome = sendProof(s, realmField, secret, serverNonce, clientNonce, address);
        ByteBuffer w = ByteBuffer.wrap(welcome);
        int welcomeStatus = w.getInt();
        if (welcomeStatus == Wire.HS_OK) {
            assertTrue(Handshake.verify(Handshake.proof(secret, 's', clientNonce, serverNonce, address,
                    realmOf(realmField)), w), "the server's proof is bound to the realm and the address");
        }
        return new int[] {Wire.HS_OK, welcomeStatus};
    }

    /** A version-4 handshake naming {@code realmField}'s realm with {@code secret}'s proof: the WELCOME's bytes. */
    private static byte[] realmWelcome(Socket s, byte[] realmField, byte[] secret) throws IOException {
        byte[] clientNonce = Handshake.nonce();
        byte[] address = TcpAttacks.dialled(s);
        byte[] serverNonce = new byte[Wire.NONCE_BYTES];
        assertEquals(Wire.HS_OK, sendHello(s, realmField, Wire.VERSION, clientNonce, address, serverNonce));
        return sendProof(s, realmField, secret, serverNonce, clientNonce, address);
    }

    /** Sends the HELLO and reads the CHALLENGE into {@code serverNonce}; its status. */
    private static int sendHello(Socket s, byte[] realmField, short version, byte[] clientNonce, byte[] address,
                                 byte[] serverNonce) throws IOException {
        OutputStream out = s.getOutputStream();
        DataInputStream in = new DataInputStream(s.getInputStream());
        int flags = Wire.FLAG_AUTH | Wire.FLAG_REALM | (address == null ? 0 : Wire.FLAG_ADDRESS);
        out.write(ByteBuffer.allocate(Wire.HELLO_BYTES + realmField.length + (address == null ? 0 : address.length))
                .putInt(Wire.MAGIC).putShort(version).putShort((short) flags).put(clientNonce).put(realmField)
                .put(address == null ? new byte[0] : address).array());
        byte[] challenge = new byte[Wire.CHALLENGE_BYTES];
        in.readFully(challenge);
        ByteBuffer c = ByteBuffer.wrap(challenge);
        assertEquals(Wire.MAGIC, c.getInt());
        c.getShort();
        int status = c.getShort();
        c.get(serverNonce);
        return status;
    }

    /** Sends the client's proof of {@code secret} and reads the WELCOME; its bytes. */
    private static byte[] sendProof(Socket s, byte[] realmField, byte[] secret, byte[] serverNonce, byte[] clientNonce,
                                    byte[] address) throws IOException {
        s.getOutputStream().write(Handshake.proof(secret, 'c', serverNonce, clientNonce, address,
                realmOf(realmField)));
        byte[] welcome = new byte[Wire.WELCOME_BYTES];
        new DataInputStream(s.getInputStream()).readFully(welcome);
        return welcome;
    }

    private static byte[] realmOf(byte[] realmField) {
        byte[] realm = new byte[realmField.length - 1];
        System.arraycopy(realmField, 1, realm, 0, realm.length);
        return realm;
    }

    /** One READ request and its whole reply (header and payload) as bytes. */
    private static byte[] rawRead(Socket s, int id, RegionDescriptor d, long offset, int length) throws IOException {
        s.getOutputStream().write(ByteBuffer.allocate(Wire.REQUEST_HEADER_BYTES).put(Wire.OP_READ).put(new byte[3])
                .putInt(id).putInt(length).putInt(d.rkey()).putLong(d.address() + offset).array());
        DataInputStream in = new DataInputStream(s.getInputStream());
        byte[] header = new byte[Wire.REPLY_HEADER_BYTES];
        in.readFully(header);
        int payload = ByteBuffer.wrap(header).getInt(8);
        byte[] reply = new byte[Wire.REPLY_HEADER_BYTES + payload];
        System.arraycopy(header, 0, reply, 0, header.length);
        in.readFully(reply, header.length, payload);
        return reply;
    }
}
