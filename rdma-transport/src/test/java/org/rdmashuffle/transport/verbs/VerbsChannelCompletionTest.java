package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The verbs channel over a device emulated in the JVM ({@link EmulatedVerbs}), which keeps RC's rules:
 * READs are signaled sparingly, yet every READ completes, in post order, with its own bytes; READs that
 * listeners post while completions are delivered go out as one chain; a READ that fails in the middle of
 * a chain leaves the READs before it succeeded and the ones after it posted again.
 */
class VerbsChannelCompletionTest {
    private static final int WINDOW = 16;
    private static final int BLOCK = 4096;
    private static final int BLOCKS = 64;
    private static final RdmaShuffleConf CONF = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "verbs",
            "spark.shuffle.rdma.verbs.maxQpReadAtoms", Integer.toString(WINDOW),
            "spark.shuffle.rdma.maxReadsInFlightPerPeer", Integer.toString(WINDOW),
            "spark.shuffle.rdma.connectTimeout", "5s"));

    private static VerbsNode node(EmulatedVerbs device) throws Exception {
        return new VerbsNode(CONF, new NodeOptions("127.0.0.1", "127.0.0.1", ControlHandler.NONE, null),
                device.choice());
    }

    /** BLOCKS blocks of BLOCK bytes, block b filled with its own pattern. */
    private static ByteBuffer served() {
        ByteBuffer b = ByteBuffer.allocateDirect(BLOCK * BLOCKS);
        for (int i = 0; i < b.capacity(); i += 4) {
            b.putInt(i, (i / BLOCK) * 0x01000193 ^ i * 0x9E3779B1);
        }
        return b;
    }

    private static boolean sameBlock(ByteBuffer served, int servedBlock, ByteBuffer sink, int sinkBlock) {
        return served.slice(servedBlock * BLOCK, BLOCK).equals(sink.slice(sinkBlock * BLOCK, BLOCK));
    }

    /** Two nodes on the emulated device: a served region of BLOCKS patterned blocks, a sink, and a channel. */
    private static final class Link implements AutoCloseable {
        final VerbsNode server;
        final VerbsNode client;
        final ByteBuffer served = served();
        final ByteBuffer sinkMemory = ByteBuffer.allocateDirect(BLOCK * BLOCKS);
        final MemoryRegion region;
        final MemoryRegion sink;
        final RdmaChannel ch;
        final RegionDescriptor d;

        Link(EmulatedVerbs device) throws Exception {
            server = node(device);
            client = node(device);
            region = server.register(served, RegionAccess.REMOTE_READ);
            sink = client.register(sinkMemory, RegionAccess.READ_SINK);
            ch = client.connect(server.localAddress());
            d = region.descriptor();
        }

        @Override
        public void close() throws Exception {
            sink.close();
            region.close();
            client.close();
            server.close();
        }
    }

    /** Records completions in the order they come. */
    private static final class Recorder implements ReadListener {
        final List<long[]> seen = new ArrayList<>();
        final CountDownLatch done;

        Recorder(int expected) {
            done = new CountDownLatch(expected);
        }

        @Override
        public synchronized void onReadComplete(long requestId, int status, int lengthBytes) {
            seen.add(new long[] {requestId, status, lengthBytes});
            done.countDown();
        }

        synchronized List<long[]> seen() {
            return new ArrayList<>(seen);
        }
    }

    @Test
    @Timeout(60)
    void shouldCompleteEveryReadInPostOrderWithItsBytesWhileSignalingAQuarterOfThem() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        try (Link l = new Link(device)) {
            ReadBatch batch = new ReadBatch(BLOCKS);
            for (int i = 0; i < BLOCKS; i++) {
                int from = (i * 7) % BLOCKS; // a permutation: each block lands elsewhere
                batch.add(l.d.address() + (long) from * BLOCK, l.d.rkey(), BLOCK, l.sink, i * BLOCK, i);
            }
            Recorder r = new Recorder(BLOCKS);
            l.ch.post(batch, r);
            assertTrue(r.done.await(30, TimeUnit.SECONDS), "every READ completes");
            List<long[]> seen = r.seen();
            for (int i = 0; i < BLOCKS; i++) {
                assertEquals(i, seen.get(i)[0], "completion " + i + " is READ " + i + " (post order)");
                assertEquals(ReadStatus.SUCCESS, seen.get(i)[1]);
                assertEquals(BLOCK, seen.get(i)[2]);
                assertTrue(sameBlock(l.served, (i * 7) % BLOCKS, l.sinkMemory, i), "bytes of READ " + i);
            }
            assertEquals(BLOCKS, device.posted.get());
            // 64 READs through a window of 16: one in four asks for a completion (the chain of the first 16,
            // then one chain of 4 per completion), not every READ.
            assertTrue(device.signaled.get() < BLOCKS / 2 && device.chains.size() < BLOCKS / 2,
                    device.signaled.get() + " of " + BLOCKS + " READs signaled in " + device.chains.size() + " posts");
            assertEquals(device.signaled.get(), device.completions.get(), "only signaled READs made completions");
        }
    }

    @Test
    @Timeout(60)
    void shouldPostWhatListenersPostWhileCompletionsAreDeliveredAsOneChain() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        int total = 2000;
        try (Link l = new Link(device)) {
            AtomicInteger next = new AtomicInteger();
            AtomicInteger bad = new AtomicInteger();
            CountDownLatch done = new CountDownLatch(total);
            long[] lastId = {-1};
            ReadListener[] self = new ReadListener[1];
            self[0] = (id, status, len) -> {
                // READ n brings block n % BLOCKS into slot n % BLOCKS; it must come after READ n - 1.
                if (status != ReadStatus.SUCCESS || id != lastId[0] + 1
                        || !sameBlock(l.served, (int) (id % BLOCKS), l.sinkMemory, (int) (id % BLOCKS))) {
                    bad.incrementAndGet();
                }
                lastId[0] = id;
                int n = next.getAndIncrement();
                if (n < total) {
                    try {
                        int b = n % BLOCKS;
                        ReadBatch one = new ReadBatch(1)
                                .add(l.d.address() + (long) b * BLOCK, l.d.rkey(), BLOCK, l.sink, b * BLOCK, n);
                        l.ch.post(one, self[0]);
                    } catch (Exception e) {
                        bad.incrementAndGet();
                    }
                }
                done.countDown();
            };
            // The sink starts zeroed (a fresh direct buffer), so a READ that wrote nothing shows.
            ReadBatch start = new ReadBatch(WINDOW);
            for (int i = 0; i < WINDOW; i++) {
                int n = next.getAndIncrement();
                int b = n % BLOCKS;
                start.add(l.d.address() + (long) b * BLOCK, l.d.rkey(), BLOCK, l.sink, b * BLOCK, n);
            }
            l.ch.post(start, self[0]);
            assertTrue(done.await(30, TimeUnit.SECONDS), "every READ completes");
            assertEquals(0, bad.get(), "READs completed out of order, failed or with wrong bytes");
            int longest = 0;
            synchronized (device.chains) {
                for (int i = 1; i < device.chains.size(); i++) {
                    longest = Math.max(longest, device.chains.get(i));
                }
            }
            assertTrue(longest > 1, "READs posted from listeners were chained (longest later chain " + longest + ")");
            assertTrue(device.chains.size() < total / 2, device.chains.size() + " posts for " + total + " READs");
            assertTrue(device.signaled.get() < total / 2, device.signaled.get() + " of " + total + " READs signaled");
        }
    }

    @Test
    @Timeout(60)
    void shouldCompleteReadsBeforeAFailedUnsignaledOneAndPostTheFlushedOnesAgain() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        int n = 12;
        int broken = 5; // unsignaled: the window of 16 signals READs 3, 7, 11
        try (Link l = new Link(device)) {
            ReadBatch batch = new ReadBatch(n);
            for (int i = 0; i < n; i++) {
                int rkey = i == broken ? l.d.rkey() + 977 : l.d.rkey(); // a key the server never gave out
                batch.add(l.d.address() + (long) i * BLOCK, rkey, BLOCK, l.sink, i * BLOCK, i);
            }
            Recorder r = new Recorder(n);
            l.ch.post(batch, r);
            assertTrue(r.done.await(30, TimeUnit.SECONDS), "every READ completes");
            List<long[]> seen = r.seen();
            for (int i = 0; i < broken; i++) {
                assertEquals(i, seen.get(i)[0], "the READs before the failed one complete first, in order");
                assertEquals(ReadStatus.SUCCESS, seen.get(i)[1]);
                assertTrue(sameBlock(l.served, i, l.sinkMemory, i), "bytes of READ " + i);
            }
            int brokenStatus = -1;
            for (long[] s : seen) {
                if (s[0] == broken) {
                    brokenStatus = (int) s[1];
                } else {
                    assertEquals(ReadStatus.SUCCESS, s[1], "READ " + s[0] + " (flushed, then posted again)");
                    assertTrue(sameBlock(l.served, (int) s[0], l.sinkMemory, (int) s[0]), "bytes of READ " + s[0]);
                }
            }
            assertEquals(ReadStatus.UNKNOWN_KEY, brokenStatus, "the failed READ completes with the peer's reason");
            assertNotEquals(1, device.chains.size(), "the flushed READs went out again on a new queue pair");
            assertTrue(l.ch.isOpen(), "the channel goes on after one invalid READ");
        }
    }

    @Test
    @Timeout(60)
    void shouldNeverReportAReadOfAFailedPostAsSucceededEvenWhenALaterPostCompletes() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        device.failPost = 0; // the channel's first post: the queue pair takes 2 of its 8 READs, then fails
        device.failAt = 2;
        try (Link l = new Link(device)) {
            Recorder r = new Recorder(12);
            ReadBatch first = new ReadBatch(8);
            for (int i = 0; i < 8; i++) {
                first.add(l.d.address() + (long) i * BLOCK, l.d.rkey(), BLOCK, l.sink, i * BLOCK, i);
            }
            l.ch.post(first, r);
            // Straight after, before the channel has failed (that runs on another thread): were this chain
            // posted, its signaled completion would complete the first one's unposted READs too.
            ReadBatch second = new ReadBatch(4);
            for (int i = 8; i < 12; i++) {
                second.add(l.d.address() + (long) i * BLOCK, l.d.rkey(), BLOCK, l.sink, i * BLOCK, i);
            }
            try {
                l.ch.post(second, r);
            } catch (org.rdmashuffle.transport.TransportException closed) {
                for (int i = 8; i < 12; i++) {
                    r.onReadComplete(i, closed.status(), 0); // the channel failed first: refused outright
                }
            }
            assertTrue(r.done.await(30, TimeUnit.SECONDS), "every READ completes");
            for (long[] s : r.seen()) {
                if (s[0] < 8) {
                    assertNotEquals(ReadStatus.SUCCESS, s[1], "READ " + s[0] + " of the failed post reported succeeded");
                }
            }
            assertEquals(12, r.seen().size());
            assertEquals(1, device.chains.size(), "nothing more is posted on a queue pair whose post failed");
        }
    }
}
