package org.rdmashuffle.transport;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
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
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.pool.RegisteredBuffer;

/**
 * The behaviour every transport provider must show, written once. A provider's test extends this
 * and says how to open a node (and skips, saying why, where its provider cannot run).
 */
public abstract class TransportContractTest {
    private static final int SERVED_BYTES = 80 << 20;
    private static ByteBuffer servedContent;

    private final List<AutoCloseable> closeables = new ArrayList<>();
    protected RdmaNode server;
    protected RdmaNode client;
    protected MemoryRegion served;

    /** Opens a node of the provider under test with {@code settings} on top of its defaults. */
    protected abstract RdmaNode openNode(Map<String, String> settings, NodeOptions options) throws IOException;

    /** The address nodes bind to and advertise (an RDMA device's address for verbs). */
    protected String host() {
        return "127.0.0.1";
    }

    /**
     * Whether the serving node sees the READs it serves (tcp does; with one-sided verbs READs the
     * serving CPU never does, so its served counters stay 0).
     */
    protected boolean servingNodeCountsReads() {
        return true;
    }

    /**
     * Whether a peer that knows a READ sink's rkey can READ it. tcp refuses; on iWARP a sink must be
     * registered remote-writable, and some devices (SoftiWARP) then serve READs of it too. Sink rkeys
     * never leave their node, so only a peer handed one by hand could try.
     */
    protected boolean readSinksAreRemotelyReadable() {
        return false;
    }

    /**
     * READs the queueing test posts to one peer in one batch (completions post a tenth more). Far more
     * than a channel's ring or send queue holds at the small {@code sendQueueDepth} that test uses.
     */
    protected int queuedReadsToOnePeer() {
        return 12_000;
    }

    protected NodeOptions baseOptions() {
        return new NodeOptions(host(), host(), ControlHandler.NONE, null);
    }

    protected RdmaNode open(Map<String, String> settings, NodeOptions options) throws IOException {
        RdmaNode n = openNode(settings, options);
        closeables.add(n);
        return n;
    }

    /** A loopback port nothing listens on (free a moment ago). */
    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    protected RdmaNode open(Map<String, String> settings) throws IOException {
        return open(settings, baseOptions().withControlHandler(req -> {
            byte[] b = new byte[req.remaining()];
            req.get(b);
            String s = new String(b, StandardCharsets.UTF_8);
            if (s.equals("fail")) {
                throw new IllegalStateException("asked to fail");
            }
            return ByteBuffer.wrap(("echo:" + s).getBytes(StandardCharsets.UTF_8));
        }));
    }

    private static synchronized ByteBuffer content() {
        if (servedContent == null) {
            ByteBuffer b = ByteBuffer.allocateDirect(SERVED_BYTES);
            SplittableRandom r = new SplittableRandom(42);
            while (b.remaining() >= 8) {
                b.putLong(r.nextLong());
            }
            servedContent = b.clear();
        }
        return servedContent;
    }

    @BeforeEach
    void startNodes() throws IOException {
        server = open(Map.of());
        client = open(Map.of());
        served = server.register(content(), RegionAccess.REMOTE_READ);
    }

    @AfterEach
    void closeNodes() throws Exception {
        for (int i = closeables.size() - 1; i >= 0; i--) {
            closeables.get(i).close();
        }
    }

    private final Map<MemoryRegion, ByteBuffer> sinkMemory = new HashMap<>();

    /** A READ_SINK region of {@code bytes} on {@code node}; its memory is {@link #memoryOf}. */
    private MemoryRegion sink(RdmaNode node, int bytes) throws IOException {
        ByteBuffer mem = ByteBuffer.allocateDirect(bytes);
        MemoryRegion r = node.register(mem, RegionAccess.READ_SINK);
        closeables.add(r);
        sinkMemory.put(r, mem);
        return r;
    }

    private ByteBuffer memoryOf(MemoryRegion sinkRegion) {
        return sinkMemory.get(sinkRegion);
    }

    private static void assertSameBytes(ByteBuffer expected, int expectedOffset, ByteBuffer actual, int actualOffset,
                                        int len, String what) {
        ByteBuffer e = expected.duplicate().clear().position(expectedOffset).limit(expectedOffset + len);
        ByteBuffer a = actual.duplicate().clear().position(actualOffset).limit(actualOffset + len);
        int m = e.mismatch(a);
        assertEquals(-1, m, what + ": first differing byte at " + m);
    }

    private int readOne(RdmaChannel ch, long address, int rkey, int len, MemoryRegion dst, int dstOffset)
            throws Exception {
        Completions c = new Completions(1);
        ch.post(new ReadBatch(1).add(address, rkey, len, dst, dstOffset, 7), c);
        assertTrue(c.await(60), "READ did not complete");
        return c.statusOf(7);
    }

    @Test
    @Timeout(180)
    void shouldReadExactBytesWhenOffsetsAndLengthsAreRandomFromOneByteTo64MiB() throws Exception {
        ByteBuffer sinkMem = ByteBuffer.allocateDirect(64 << 20);
        MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK);
        closeables.add(sink);
        RdmaChannel ch = client.connect(server.localAddress());
        RegionDescriptor d = served.descriptor();
        SplittableRandom rnd = new SplittableRandom(7);
        List<Integer> lengths = new ArrayList<>(List.of(1, 2, 7, 64 << 20, (64 << 20) - 1, 4096, 65536, 1 << 20));
        for (int i = 0; i < 60; i++) {
            lengths.add(1 + (int) Math.min((64 << 20) - 1, (long) Math.pow(2, rnd.nextDouble() * 26)));
        }
        for (int len : lengths) {
            int off = rnd.nextInt(SERVED_BYTES - len + 1);
            int dstOff = rnd.nextInt((64 << 20) - len + 1);
            int st = readOne(ch, d.address() + off, d.rkey(), len, sink, dstOff);
            assertEquals(ReadStatus.SUCCESS, st, "READ of " + len + " at " + off + ": " + ReadStatus.describe(st));
            assertSameBytes(content(), off, sinkMem, dstOff, len, "READ of " + len + " at " + off);
        }
        NodeStats s = client.stats();
        assertEquals(lengths.size(), s.readsPosted());
        assertEquals(lengths.size(), s.readsCompleted());
        assertEquals(0, s.readsFailed());
        assertEquals(1, s.channelsOpened());
        assertEquals(0, s.reconnects());
        assertEquals(1, s.openChannels());
        assertEquals(lengths.stream().mapToLong(Integer::longValue).sum(), s.bytesRead());
        if (servingNodeCountsReads()) {
            assertEquals(s.bytesRead(), server.stats().bytesServed());
        }
    }

    @Test
    @Timeout(60)
    void shouldServeFileRegionsByteForByteWhenFileIsRegistered(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("map-output.data");
        byte[] data = new byte[3 << 20];
        new SplittableRandom(3).nextBytes(data);
        Files.write(file, data);
        MemoryRegion fileRegion = server.registerFile(file, 1 << 20, 2 << 20); // the file's second and third MiB
        ByteBuffer sinkMem = ByteBuffer.allocateDirect(2 << 20);
        MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK);
        closeables.add(sink);
        RdmaChannel ch = client.connect(server.localAddress());
        RegionDescriptor d = fileRegion.descriptor();
        assertEquals(2 << 20, d.length());
        SplittableRandom rnd = new SplittableRandom(5);
        for (int i = 0; i < 50; i++) {
            int len = 1 + rnd.nextInt(2 << 20);
            int off = rnd.nextInt((2 << 20) - len + 1);
            assertEquals(ReadStatus.SUCCESS, readOne(ch, d.address() + off, d.rkey(), len, sink, 0));
            assertSameBytes(ByteBuffer.wrap(data), (1 << 20) + off, sinkMem, 0, len, "file READ");
        }
        fileRegion.close();
        assertEquals(ReadStatus.UNKNOWN_KEY, readOne(ch, d.address(), d.rkey(), 10, sink, 0));
    }

    @Test
    @Timeout(60)
    void shouldServeTheOpenedFilesBytesWhenItsPathNamesAnotherFileByThen(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("map-output.data");
        byte[] data = new byte[1 << 20];
        new SplittableRandom(7).nextBytes(data);
        Files.write(file, data);
        MemoryRegion fileRegion;
        try (java.nio.channels.FileChannel opened = java.nio.channels.FileChannel.open(file)) {
            Files.move(file, dir.resolve("moved.data"));
            byte[] other = new byte[data.length];
            new SplittableRandom(8).nextBytes(other);
            Files.write(file, other); // the path now names another file of the same length
            fileRegion = server.registerFile(opened, file.toString(), 4096, data.length - 4096, null);
        }
        closeables.add(fileRegion);
        ByteBuffer sinkMem = ByteBuffer.allocateDirect(data.length);
        MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK);
        closeables.add(sink);
        RdmaChannel ch = client.connect(server.localAddress());
        RegionDescriptor d = fileRegion.descriptor();
        assertEquals(ReadStatus.SUCCESS, readOne(ch, d.address(), d.rkey(), data.length - 4096, sink, 0));
        assertSameBytes(ByteBuffer.wrap(data), 4096, sinkMem, 0, data.length - 4096, "the opened file's bytes");
    }

    @Test
    @Timeout(60)
    void shouldCompleteEveryReadIntoPooledBuffersWhenBatchHoldsOneThousand() throws Exception {
        BufferPoolOptions po = BufferPoolOptions.from(new RdmaShuffleConf(Map.of(
                "spark.shuffle.rdma.pool.leakDetection", "paranoid")));
        try (BufferPool pool = new BufferPool(po, client.sinkRegistrar())) {
            RdmaChannel ch = client.connect(server.localAddress());
            RegionDescriptor d = served.descriptor();
            SplittableRandom rnd = new SplittableRandom(11);
            ReadBatch batch = new ReadBatch(16);
            RegisteredBuffer[] bufs = new RegisteredBuffer[1000];
            int[] offs = new int[1000];
            int[] lens = new int[1000];
            for (int i = 0; i < 1000; i++) {
                lens[i] = 1 + rnd.nextInt(16 << 10);
                offs[i] = rnd.nextInt(SERVED_BYTES - lens[i]);
                bufs[i] = pool.acquire(lens[i]);
                batch.add(d.address() + offs[i], d.rkey(), lens[i], bufs[i], 0, i);
            }
            Completions c = new Completions(1000);
            ch.post(batch, c);
            batch.clear();
            assertTrue(c.await(30), "not all 1000 READs completed: " + c.status.size());
            assertEquals(1000, c.count(ReadStatus.SUCCESS));
            assertEquals(0, c.duplicates);
            for (int i = 0; i < 1000; i++) {
                assertEquals(lens[i], c.lengths.get((long) i));
                assertSameBytes(content(), offs[i], bufs[i].byteBuffer(), 0, lens[i], "READ " + i);
                assertFalse(c.threads.get((long) i).equals(Thread.currentThread().getName()),
                        "completion ran on the posting thread");
                bufs[i].release();
            }
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    @Test
    @Timeout(120)
    void shouldKeepDataApartWhenSixteenChannelsReadConcurrently() throws Exception {
        ExecutorService threads = Executors.newFixedThreadPool(16);
        try {
            List<Future<?>> done = new ArrayList<>();
            for (int t = 0; t < 16; t++) {
                RdmaNode node = open(Map.of());
                final int seed = t;
                done.add(threads.submit(() -> {
                    ByteBuffer sinkMem = ByteBuffer.allocateDirect(1 << 20);
                    MemoryRegion sink = node.register(sinkMem, RegionAccess.READ_SINK);
                    RdmaChannel ch = node.connect(server.localAddress());
                    RegionDescriptor d = served.descriptor();
                    SplittableRandom rnd = new SplittableRandom(seed);
                    for (int round = 0; round < 20; round++) {
                        ReadBatch batch = new ReadBatch(16);
                        int[] offs = new int[16];
                        int[] lens = new int[16];
                        for (int i = 0; i < 16; i++) {
                            lens[i] = 1 + rnd.nextInt(64 << 10);
                            offs[i] = rnd.nextInt(SERVED_BYTES - lens[i]);
                            batch.add(d.address() + offs[i], d.rkey(), lens[i], sink, i * (64 << 10), i);
                        }
                        Completions c = new Completions(16);
                        ch.post(batch, c);
                        assertTrue(c.await(30));
                        assertEquals(16, c.count(ReadStatus.SUCCESS));
                        for (int i = 0; i < 16; i++) {
                            assertSameBytes(content(), offs[i], sinkMem, i * (64 << 10), lens[i], "channel " + seed);
                        }
                    }
                    sink.close();
                    return null;
                }));
            }
            for (Future<?> f : done) {
                f.get(100, TimeUnit.SECONDS);
            }
        } finally {
            threads.shutdownNow();
        }
        if (servingNodeCountsReads()) {
            assertEquals(16 * 20 * 16, server.stats().readsServed());
        }
    }

    /**
     * Several connections READ overlapping ranges of one region at once, large and small, while two of
     * them drain slowly (their completions pause, so their replies back up at the server): every
     * payload must be that READ's bytes, whatever the other connections asked meanwhile.
     */
    @Test
    @Timeout(240)
    void shouldServeEveryPayloadByteExactWhenManyConnectionsReadOverlappingRangesAndSomeDrainSlowly()
            throws Exception {
        int clients = 6;
        int rounds = 40;
        int perRound = 8;
        int slot = 1 << 20;
        ExecutorService threads = Executors.newFixedThreadPool(clients);
        try {
            List<Future<?>> done = new ArrayList<>();
            for (int t = 0; t < clients; t++) {
                RdmaNode node = open(Map.of());
                final int seed = 100 + t;
                final boolean slow = t < 2;
                done.add(threads.submit(() -> {
                    ByteBuffer sinkMem = ByteBuffer.allocateDirect(perRound * slot);
                    MemoryRegion sink = node.register(sinkMem, RegionAccess.READ_SINK);
                    RdmaChannel ch = node.connect(server.localAddress());
                    RegionDescriptor d = served.descriptor();
                    SplittableRandom rnd = new SplittableRandom(seed);
                    for (int round = 0; round < rounds; round++) {
                        ReadBatch batch = new ReadBatch(perRound);
                        int[] offs = new int[perRound];
                        int[] lens = new int[perRound];
                        for (int i = 0; i < perRound; i++) {
                            // Ranges start within the region's first 4 MiB, so connections overlap.
                            lens[i] = rnd.nextInt(4) == 0 ? 1_000_000 : 1 + rnd.nextInt(64 << 10);
                            offs[i] = rnd.nextInt(4 << 20);
                            batch.add(d.address() + offs[i], d.rkey(), lens[i], sink, i * slot, i);
                        }
                        Completions c = new Completions(perRound) {
                            @Override
                            public void onReadComplete(long requestId, int st, int lengthBytes) {
                                if (slow) {
                                    try {
                                        Thread.sleep(2);
                                    } catch (InterruptedException e) {
                                        Thread.currentThread().interrupt();
                                    }
                                }
                                super.onReadComplete(requestId, st, lengthBytes);
                            }
                        };
                        ch.post(batch, c);
                        assertTrue(c.await(60), "READs did not complete");
                        assertEquals(perRound, c.count(ReadStatus.SUCCESS));
                        for (int i = 0; i < perRound; i++) {
                            assertSameBytes(content(), offs[i], sinkMem, i * slot, lens[i],
                                    "connection " + seed + " round " + round + " READ " + i + " (" + lens[i] + " bytes)");
                        }
                    }
                    sink.close();
                    return null;
                }));
            }
            for (Future<?> f : done) {
                f.get(200, TimeUnit.SECONDS);
            }
        } finally {
            threads.shutdownNow();
        }
    }

    /**
     * One node READs from two peers into one sink region at once, large READs into disjoint slices:
     * a payload that arrives in pieces on one channel must land in its own slice, whatever the other
     * channel lands meanwhile in the same region.
     */
    @Test
    @Timeout(120)
    void shouldLandEveryPayloadInPlaceWhenChannelsToTwoPeersFillOneSinkAtOnce() throws Exception {
        RdmaNode second = open(Map.of());
        MemoryRegion servedToo = second.register(content(), RegionAccess.REMOTE_READ);
        int slice = 1 << 20;
        int perPeer = 8;
        MemoryRegion sink = sink(client, 2 * perPeer * slice);
        ByteBuffer sinkMem = memoryOf(sink);
        RdmaChannel a = client.connect(server.localAddress());
        RdmaChannel b = client.connect(second.localAddress());
        SplittableRandom rnd = new SplittableRandom(13);
        for (int round = 0; round < 10; round++) {
            int[] offs = new int[2 * perPeer];
            ReadBatch ba = new ReadBatch(perPeer);
            ReadBatch bb = new ReadBatch(perPeer);
            for (int i = 0; i < 2 * perPeer; i++) {
                offs[i] = rnd.nextInt(SERVED_BYTES - slice);
                RegionDescriptor d = (i % 2 == 0 ? served : servedToo).descriptor();
                (i % 2 == 0 ? ba : bb).add(d.address() + offs[i], d.rkey(), slice, sink, i * slice, i);
            }
            Completions c = new Completions(2 * perPeer);
            a.post(ba, c);
            b.post(bb, c);
            assertTrue(c.await(60), "READs did not complete");
            assertEquals(2 * perPeer, c.count(ReadStatus.SUCCESS));
            for (int i = 0; i < 2 * perPeer; i++) {
                assertSameBytes(content(), offs[i], sinkMem, i * slice, slice, "round " + round + " slice " + i);
            }
        }
    }

    /**
     * One poster queues more READs on one channel than its ring holds, and completions post further
     * READs from the completion thread: nothing may wait for room that only that thread could free.
     */
    @Test
    @Timeout(120)
    void shouldCompleteEveryReadWhenTenThousandAreQueuedToOnePeerAndCompletionsPostMore() throws Exception {
        int first = queuedReadsToOnePeer();
        int follow = first / 10;
        int len = 64;
        // A small send queue, so that even a smaller count (see queuedReadsToOnePeer) queues far past it.
        RdmaNode poster = open(Map.of("spark.shuffle.rdma.sendQueueDepth", "16"));
        ByteBuffer sinkMem = ByteBuffer.allocateDirect((first + follow) * len);
        MemoryRegion sink = poster.register(sinkMem, RegionAccess.READ_SINK);
        closeables.add(sink);
        RdmaChannel ch = poster.connect(server.localAddress());
        RegionDescriptor d = served.descriptor();
        List<Throwable> postErrors = java.util.Collections.synchronizedList(new ArrayList<>());
        Completions c = new Completions(first + follow) {
            @Override
            public void onReadComplete(long requestId, int st, int lengthBytes) {
                super.onReadComplete(requestId, st, lengthBytes);
                if (requestId < first && requestId % 10 == 0) {
                    int k = first + (int) (requestId / 10);
                    try {
                        ch.post(new ReadBatch(1).add(d.address() + (long) k * 977, d.rkey(), len, sink, k * len, k), this);
                    } catch (TransportException | RuntimeException e) {
                        postErrors.add(e);
                    }
                }
            }
        };
        ReadBatch batch = new ReadBatch(first);
        for (int i = 0; i < first; i++) {
            batch.add(d.address() + (long) i * 977, d.rkey(), len, sink, i * len, i);
        }
        ch.post(batch, c);
        assertTrue(c.await(100), "only " + c.status.size() + " of " + (first + follow) + " READs completed");
        assertEquals(List.of(), postErrors);
        assertEquals(first + follow, c.count(ReadStatus.SUCCESS));
        assertEquals(0, c.duplicates);
        for (int i = 0; i < first + follow; i++) {
            assertSameBytes(content(), i * 977, sinkMem, i * len, len, "READ " + i);
        }
    }

    @Test
    @Timeout(60)
    void shouldGiveErrorCompletionAndKeepChannelWorkingWhenReadIsInvalid() throws Exception {
        MemoryRegion sink = sink(client, 1 << 20);
        RdmaChannel ch = client.connect(server.localAddress());
        RegionDescriptor d = served.descriptor();
        MemoryRegion stale = server.register(ByteBuffer.allocateDirect(4096), RegionAccess.REMOTE_READ);
        RegionDescriptor sd = stale.descriptor();
        stale.close();
        assertFalse(stale.isOpen());
        MemoryRegion notReadable = sink(server, 4096);
        int unknownKey = d.rkey() ^ 0x5A5A5A5A;
        ByteBuffer sinkMem = memoryOf(sink);
        for (int i = 0; i < 1000; i++) {
            sinkMem.put(i, (byte) 0xEE);
        }

        assertEquals(ReadStatus.UNKNOWN_KEY, readOne(ch, d.address(), unknownKey, 100, sink, 0));
        assertEquals(ReadStatus.UNKNOWN_KEY, readOne(ch, sd.address(), sd.rkey(), 100, sink, 0));
        assertEquals(ReadStatus.OUT_OF_BOUNDS, readOne(ch, d.address() + SERVED_BYTES - 10, d.rkey(), 11, sink, 0));
        assertEquals(ReadStatus.OUT_OF_BOUNDS, readOne(ch, d.address() - 1, d.rkey(), 10, sink, 0));
        assertEquals(ReadStatus.OUT_OF_BOUNDS, readOne(ch, d.address() + SERVED_BYTES, d.rkey(), 1, sink, 0));
        assertEquals(ReadStatus.OUT_OF_BOUNDS, readOne(ch, Long.MAX_VALUE, d.rkey(), 1, sink, 0));
        assertEquals(ReadStatus.INVALID_LENGTH, readOne(ch, d.address(), d.rkey(), 0, sink, 0));
        int denied = readOne(ch, notReadable.descriptor().address(), notReadable.descriptor().rkey(), 10, sink, 2000);
        if (readSinksAreRemotelyReadable()) {
            assertTrue(denied == ReadStatus.ACCESS_DENIED || denied == ReadStatus.SUCCESS, ReadStatus.describe(denied));
        } else {
            assertEquals(ReadStatus.ACCESS_DENIED, denied);
        }
        int expectedFailures = denied == ReadStatus.SUCCESS ? 7 : 8;
        // Nothing was written into the sink by the failed READs, and the same channel still works.
        for (int i = 0; i < 1000; i++) {
            assertEquals((byte) 0xEE, sinkMem.get(i), "failed READ wrote into the sink");
        }
        assertTrue(ch.isOpen());
        assertEquals(ReadStatus.SUCCESS, readOne(ch, d.address() + 5, d.rkey(), 1000, sink, 0));
        assertSameBytes(content(), 5, memoryOf(sink), 0, 1000, "after errors");
        assertSame(ch, client.connect(server.localAddress()));
        assertEquals(expectedFailures, client.stats().readsFailed());
    }

    @Test
    @Timeout(60)
    void shouldCompleteEveryOutstandingReadWithErrorWhenPeerClosesMidway() throws Exception {
        RdmaNode peer = open(Map.of());
        MemoryRegion big = peer.register(content(), RegionAccess.REMOTE_READ);
        MemoryRegion sink = sink(client, 1 << 20);
        RdmaChannel ch = client.connect(peer.localAddress());
        RegionDescriptor d = big.descriptor();
        ReadBatch batch = new ReadBatch(1000);
        for (int i = 0; i < 1000; i++) {
            batch.add(d.address() + (long) (i % 64) * (1 << 20), d.rkey(), 1 << 20, sink, 0, i);
        }
        Completions c = new Completions(1000);
        ch.post(batch, c);
        peer.close();
        assertTrue(c.await(30), "READs left hanging after the peer closed: " + (1000 - c.status.size()));
        assertEquals(0, c.duplicates);
        long failedCount = 1000 - c.count(ReadStatus.SUCCESS);
        assertTrue(failedCount > 0, "the peer closed before serving everything, so some READs must fail");
        for (int s : c.status.values()) {
            // IDLE_CLOSED: the peer closed in order with no reply under way, so the READ was not served (connect again)
            assertTrue(s == ReadStatus.SUCCESS || s == ReadStatus.CONNECTION_LOST || s == ReadStatus.CHANNEL_CLOSED
                            || s == ReadStatus.IDLE_CLOSED, "unexpected status " + ReadStatus.describe(s));
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (ch.isOpen() && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertFalse(ch.isOpen());
        assertThrows(TransportException.class, () -> ch.post(new ReadBatch(1).add(d.address(), d.rkey(), 1, sink, 0, 1),
                (id, st, len) -> { }));
    }

    @Test
    @Timeout(30)
    void shouldFailClearlyWithinConnectTimeoutWhenNothingListens() throws Exception {
        int port = freePort();
        RdmaNode n = open(Map.of("spark.shuffle.rdma.connectTimeout", "2s", "spark.shuffle.rdma.connectRetries", "1",
                "spark.shuffle.rdma.connectRetryWait", "100ms"));
        NodeAddress nowhere = new NodeAddress(host(), port, n.localAddress().provider());
        long t0 = System.nanoTime();
        TransportException e = assertThrows(TransportException.class, () -> n.connect(nowhere));
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(ms < 2 * 2000 + 100 + 1000, "took " + ms + " ms");
        assertTrue(e.getMessage().contains(nowhere.toString()), e.getMessage());
        assertTrue(e.getMessage().contains("2 attempt(s)"), e.getMessage());
    }

    @Test
    @Timeout(30)
    void shouldConnectOnALaterAttemptWhenThePeerStartsListeningDuringRetries() throws Exception {
        int port = freePort();
        RdmaNode n = open(Map.of("spark.shuffle.rdma.connectTimeout", "2s", "spark.shuffle.rdma.connectRetries", "20",
                "spark.shuffle.rdma.connectRetryWait", "100ms"));
        NodeAddress later = new NodeAddress(host(), port, n.localAddress().provider());
        java.util.concurrent.CompletableFuture<RdmaChannel> connecting =
                java.util.concurrent.CompletableFuture.supplyAsync(() -> {
                    try {
                        return n.connect(later);
                    } catch (TransportException e) {
                        throw new java.util.concurrent.CompletionException(e);
                    }
                });
        Thread.sleep(350); // a few attempts fail with "connection refused" first
        assertFalse(connecting.isDone(), "connect gave up (or succeeded) before the peer listened");
        RdmaNode peer = open(Map.of("spark.shuffle.rdma.port", Integer.toString(port),
                "spark.shuffle.rdma.port.maxRetries", "0"));
        assertEquals(port, peer.localAddress().port());
        RdmaChannel ch = connecting.get(10, TimeUnit.SECONDS);
        assertEquals(later, ch.peer());
    }

    @Test
    @Timeout(30)
    void shouldAnswerControlMessagesAndReportHandlerFailure() throws Exception {
        RdmaChannel ch = client.connect(server.localAddress());
        ByteBuffer reply = ch.call(ByteBuffer.wrap("directory?".getBytes(StandardCharsets.UTF_8)))
                .get(10, TimeUnit.SECONDS);
        byte[] b = new byte[reply.remaining()];
        reply.get(b);
        assertEquals("echo:directory?", new String(b, StandardCharsets.UTF_8));
        ExecutionException e = assertThrows(ExecutionException.class,
                () -> ch.call(ByteBuffer.wrap("fail".getBytes(StandardCharsets.UTF_8))).get(10, TimeUnit.SECONDS));
        assertEquals(ReadStatus.HANDLER_FAILED, ((TransportException) e.getCause()).status());
        assertTrue(ch.isOpen());
        byte[] large = new byte[60_000]; // under the default limit (64 KiB), over the inline and first-buffer sizes
        new SplittableRandom(1).nextBytes(large);
        for (int i = 0; i < large.length; i++) {
            large[i] = (byte) ('a' + (large[i] & 15));
        }
        ByteBuffer big = ch.call(ByteBuffer.wrap(large)).get(10, TimeUnit.SECONDS);
        byte[] got = new byte[big.remaining()];
        big.get(got);
        assertEquals("echo:" + new String(large, StandardCharsets.UTF_8), new String(got, StandardCharsets.UTF_8));
    }

    /** A handler answering "later" with a future the test completes (as a handler's worker would), else at once. */
    private static ControlHandler answeringLater(java.util.concurrent.BlockingQueue<CompletableFuture<ByteBuffer>> later) {
        return LaterReplies.handler(later, request -> ByteBuffer.wrap(
                ("now:" + StandardCharsets.UTF_8.decode(request)).getBytes(StandardCharsets.UTF_8)));
    }

    private static String text(ByteBuffer b) {
        return StandardCharsets.UTF_8.decode(b).toString();
    }

    @Test
    @Timeout(60)
    void shouldAnswerAControlMessageWhenItsHandlersFutureCompletesAndServeOtherPeersMeanwhile() throws Exception {
        java.util.concurrent.BlockingQueue<CompletableFuture<ByteBuffer>> later =
                new java.util.concurrent.LinkedBlockingQueue<>();
        RdmaNode answering = open(Map.of(), baseOptions().withControlHandler(answeringLater(later)));
        MemoryRegion region = answering.register(content(), RegionAccess.REMOTE_READ);
        RdmaChannel waiting = client.connect(answering.localAddress());
        CompletableFuture<ByteBuffer> slow = waiting.call(StandardCharsets.UTF_8.encode("later"));
        CompletableFuture<ByteBuffer> handed = later.poll(30, TimeUnit.SECONDS);
        assertTrue(handed != null, "the handler was not asked");

        // Another peer of the same node: its READs and control messages are answered while the reply is pending.
        RdmaNode other = open(Map.of());
        RdmaChannel ch = other.connect(answering.localAddress());
        MemoryRegion sink = sink(other, 1 << 20);
        RegionDescriptor d = region.descriptor();
        assertEquals(ReadStatus.SUCCESS, readOne(ch, d.address() + 4096, d.rkey(), 1 << 20, sink, 0));
        assertSameBytes(content(), 4096, memoryOf(sink), 0, 1 << 20, "a READ while a control reply is pending");
        assertEquals("now:meanwhile", text(ch.call(StandardCharsets.UTF_8.encode("meanwhile")).get(30, TimeUnit.SECONDS)));
        assertFalse(slow.isDone(), "a reply came before the handler's future completed");

        handed.complete(StandardCharsets.UTF_8.encode("answered later"));
        assertEquals("answered later", text(slow.get(30, TimeUnit.SECONDS)));
        // the waiting connection goes on
        assertEquals("now:after", text(waiting.call(StandardCharsets.UTF_8.encode("after")).get(30, TimeUnit.SECONDS)));
        CompletableFuture<ByteBuffer> failing = waiting.call(StandardCharsets.UTF_8.encode("later"));
        later.poll(30, TimeUnit.SECONDS).completeExceptionally(new IllegalStateException("the worker failed"));
        ExecutionException e = assertThrows(ExecutionException.class, () -> failing.get(30, TimeUnit.SECONDS));
        assertEquals(ReadStatus.HANDLER_FAILED, ((TransportException) e.getCause()).status());
        assertTrue(waiting.isOpen());
        assertEquals(null, answering.failure());
    }

    @Test
    @Timeout(30)
    void shouldConnectOnlyWithTheSameSecretWhenAuthenticationIsOn() throws Exception {
        byte[] secret = "s3cret".getBytes(StandardCharsets.UTF_8);
        RdmaNode authServer = open(Map.of(), baseOptions().withSecret(secret));
        MemoryRegion r = authServer.register(ByteBuffer.allocateDirect(4096), RegionAccess.REMOTE_READ);
        RdmaNode good = open(Map.of(), baseOptions().withSecret(secret));
        RdmaChannel ch = good.connect(authServer.localAddress());
        MemoryRegion sink = sink(good, 4096);
        assertEquals(ReadStatus.SUCCESS, readOne(ch, r.descriptor().address(), r.descriptor().rkey(), 4096, sink, 0));

        Map<String, String> fast = Map.of("spark.shuffle.rdma.connectRetries", "0");
        RdmaNode wrong = open(fast, baseOptions().withSecret("other".getBytes(StandardCharsets.UTF_8)));
        TransportException e1 = assertThrows(TransportException.class, () -> wrong.connect(authServer.localAddress()));
        assertTrue(e1.getMessage().contains("authentication failed"), e1.getMessage());
        RdmaNode none = open(fast, baseOptions());
        TransportException e2 = assertThrows(TransportException.class, () -> none.connect(authServer.localAddress()));
        assertTrue(e2.getMessage().contains("spark.authenticate"), e2.getMessage());
        assertTrue(authServer.stats().connectionsRefused() >= 2,
                "refused connections counted: " + authServer.stats().connectionsRefused());
        assertEquals(0, good.stats().connectionsRefused());
    }

    @Test
    @Timeout(30)
    void shouldReconnectWithNewChannelWhenCachedOneWasClosed() throws Exception {
        RdmaChannel first = client.connect(server.localAddress());
        assertSame(first, client.connect(server.localAddress()));
        first.close();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (first.isOpen() && System.nanoTime() < deadline) {
            Thread.sleep(5);
        }
        RdmaChannel second = client.connect(server.localAddress());
        assertNotSame(first, second);
        assertTrue(second.isOpen());
        MemoryRegion sink = sink(client, 4096);
        assertEquals(ReadStatus.SUCCESS, readOne(second, served.descriptor().address(), served.descriptor().rkey(),
                4096, sink, 0));
        assertEquals(2, client.stats().channelsOpened());
        assertEquals(1, client.stats().reconnects());
    }

    @Test
    @Timeout(30)
    void shouldReturnRegisteredBytesToZeroWhenRegionsAndNodeClose() throws Exception {
        RdmaNode n = open(Map.of());
        MemoryRegion a = n.register(ByteBuffer.allocateDirect(1000), RegionAccess.REMOTE_READ);
        MemoryRegion b = n.register(ByteBuffer.allocateDirect(3000), RegionAccess.READ_SINK);
        assertEquals(2, n.stats().registeredRegions());
        assertEquals(4000, n.stats().registeredBytes());
        assertNotEquals(a.descriptor().rkey(), b.descriptor().rkey());
        a.close();
        a.close();
        assertEquals(3000, n.stats().registeredBytes());
        n.close();
        assertFalse(b.isOpen());
        assertEquals(0, n.stats().registeredBytes());
        assertThrows(TransportException.class, () -> n.connect(server.localAddress()));
    }

    @Test
    @Timeout(30)
    void shouldLeaveNoThreadsBehindWhenNodesCloseWithOpenChannels() throws Exception {
        RdmaNode a = open(Map.of());
        RdmaNode b = open(Map.of());
        a.connect(b.localAddress());
        b.connect(a.localAddress());
        String pa = Integer.toString(a.localAddress().port());
        String pb = Integer.toString(b.localAddress().port());
        assertTrue(Thread.getAllStackTraces().keySet().stream().anyMatch(t -> t.getName().endsWith("-" + pa)),
                "the provider names its threads after the node's port");
        long t0 = System.nanoTime();
        a.close();
        b.close();
        assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) < 5000, "close took too long");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (System.nanoTime() < deadline && Thread.getAllStackTraces().keySet().stream()
                .anyMatch(t -> t.isAlive() && (t.getName().endsWith("-" + pa) || t.getName().endsWith("-" + pb)))) {
            Thread.sleep(10);
        }
        assertFalse(Thread.getAllStackTraces().keySet().stream()
                .anyMatch(t -> t.isAlive() && (t.getName().endsWith("-" + pa) || t.getName().endsWith("-" + pb))),
                "node threads still running after close");
    }

    @Test
    void shouldRejectDestinationOutsideItsBufferWhenBatchIsBuilt() throws Exception {
        MemoryRegion sink = sink(client, 4096);
        ReadBatch b = new ReadBatch(1);
        assertThrows(IndexOutOfBoundsException.class, () -> b.add(0, 1, 4000, sink, 100, 1));
        assertThrows(IndexOutOfBoundsException.class, () -> b.add(0, 1, 10, sink, -1, 1));
        assertThrows(IllegalArgumentException.class, () -> b.add(0, 1, 10, served, 0, 1));
        assertEquals(0, b.size());
    }
}
