package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.CONF;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.Outputs;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.TransportException;

/**
 * A channel that closed without serving what was outstanding on it ({@link ReadStatus#IDLE_CLOSED}: its peer made
 * room for a newcomer while the task held it silent) costs a reconnect, never a failed block or a blamed peer.
 */
class BlockFetcherClosedUnservedTest {
    /**
     * Passes its first {@code passing} posts to the real channel; completes every READ of the next with IDLE_CLOSED
     * (off the posting thread) and closes; then says so to every post.
     */
    private static final class ClosesUnserved implements RdmaChannel {
        private final RdmaChannel real;
        private int passing;
        private volatile boolean open = true;

        ClosesUnserved(RdmaChannel real, int passing) {
            this.real = real;
            this.passing = passing;
        }

        @Override
        public NodeAddress peer() {
            return real.peer();
        }

        @Override
        public void post(ReadBatch batch, ReadListener listener) throws TransportException {
            if (!open) {
                throw new TransportException("closed by its peer with no reply under way", ReadStatus.IDLE_CLOSED, null);
            }
            if (passing > 0) {
                passing--;
                real.post(batch, listener);
                return;
            }
            open = false;
            long[] ids = new long[batch.size()];
            for (int i = 0; i < ids.length; i++) {
                ids[i] = batch.requestId(i);
            }
            Thread t = new Thread(() -> {
                for (long id : ids) {
                    listener.onReadComplete(id, ReadStatus.IDLE_CLOSED, 0);
                }
            }, "closes-unserved");
            t.start();
        }

        @Override
        public CompletableFuture<ByteBuffer> call(ByteBuffer request) {
            return real.call(request);
        }

        @Override
        public boolean isOpen() {
            return open;
        }

        @Override
        public void close() {
            open = false;
        }
    }

    /** {@code reducer}, whose first channel closes unserved after {@code passing} posts; {@code connects} counted. */
    private static RdmaNode closingFirstChannel(RdmaNode reducer, int passing, AtomicInteger connects) {
        return (RdmaNode) Proxy.newProxyInstance(RdmaNode.class.getClassLoader(),
                new Class<?>[] {RdmaNode.class}, (proxy, method, args) -> {
                    try {
                        Object result = method.invoke(reducer, args);
                        if (method.getName().equals("connect") && connects.getAndIncrement() == 0) {
                            return new ClosesUnserved((RdmaChannel) result, passing);
                        }
                        return result;
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
    }

    @Test
    @Timeout(60)
    void shouldPostAgainOnAFreshChannelWhenReadsComeBackClosedUnserved(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 51, 2, 3, 50_000, 5);
            AtomicInteger connects = new AtomicInteger();
            RdmaNode node = closingFirstChannel(reducer, 0, connects);
            try (BlockFetcher fetcher = new BlockFetcher(node, pool, 1 << 20, 64 << 10, 30_000)) {
                fetcher.add(out.request(executor.localAddress(), 0, 0, 3));
                try (BlockFetcher.Block b = fetcher.next()) { // a FetchFailure here would blame the peer
                    out.assertBytes(b);
                }
                assertEquals(2, connects.get(), "connected once more after the channel closed unserved");
                fetcher.add(out.request(executor.localAddress(), 1, 0, 3));
                try (BlockFetcher.Block b = fetcher.next()) {
                    out.assertBytes(b);
                }
            }
            out.table.close();
            assertEquals(0, pool.stats().inUseBuffers(), "every buffer back");
        }
    }

    @Test
    @Timeout(60)
    void shouldReadTheNextBlockWhenThePeerEvictedTheHeldChannelToAdmitANewcomer(@TempDir Path dir) throws Exception {
        Map<String, String> m = new HashMap<>();
        m.put("spark.shuffle.rdma.provider", "tcp");
        m.put("spark.shuffle.rdma.maxConnections", "2");
        m.put("spark.shuffle.rdma.connectRetries", "0");
        RdmaShuffleConf small = new RdmaShuffleConf(m);
        try (RdmaNode executor = RdmaTransport.open(small, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(small, NodeOptions.loopback());
             RdmaNode newcomer1 = RdmaTransport.open(small, NodeOptions.loopback());
             RdmaNode newcomer2 = RdmaTransport.open(small, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(small), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 52, 2, 3, 50_000, 6);
            try (BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 30_000)) {
                fetcher.add(out.request(executor.localAddress(), 0, 0, 3));
                try (BlockFetcher.Block b = fetcher.next()) {
                    out.assertBytes(b);
                }
                newcomer1.connect(executor.localAddress()); // the node is full now
                Thread.sleep(1500); // the task decodes: its channel silent past a second
                newcomer2.connect(executor.localAddress()); // admitted in place of the silent channel
                assertEquals(1, executor.stats().connectionsEvictedIdle(), "the task's connection went");
                Thread.sleep(200);
                fetcher.add(out.request(executor.localAddress(), 1, 0, 3));
                try (BlockFetcher.Block b = fetcher.next()) { // a FetchFailure here would blame a healthy peer
                    out.assertBytes(b);
                }
            }
            out.table.close();
            assertFalse(reducer.stats().readsFailed() > 0, "no READ failed: " + reducer.stats());
        }
    }

    @Test
    @Timeout(60)
    void shouldPostAStreamedBlocksWindowAgainWhenItComesBackClosedUnserved(@TempDir Path dir) throws Exception {
        RdmaShuffleConf smallPool = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.pool.leakDetection", "paranoid", "spark.shuffle.rdma.pool.maxBufferSize", "64k",
                "spark.shuffle.rdma.pool.chunkSize", "256k"));
        try (RdmaNode executor = RdmaTransport.open(smallPool, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(smallPool, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(smallPool), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 53, 1, 4, 400_000, 7);
            AtomicInteger connects = new AtomicInteger();
            // posts 1 and 2: the slot and the metadata; 3: the first window; 4, a later window, closes unserved
            RdmaNode node = closingFirstChannel(reducer, 3, connects);
            try (BlockFetcher fetcher = new BlockFetcher(node, pool, 1 << 20, 16 << 10, 30_000)) {
                fetcher.add(out.request(executor.localAddress(), 0, 0, 4));
                try (BlockFetcher.Block b = fetcher.next()) {
                    assertTrue(b.length() > 3 * (64 << 10), "a block streamed in several windows: " + b.length());
                    java.io.InputStream in = b.open(0, b.length());
                    byte[] all = in.readAllBytes(); // a failed window would throw here, blaming the peer
                    assertEquals(-1, ByteBuffer.wrap(all).mismatch(ByteBuffer.wrap(out.data[0])), "bytes");
                }
                assertEquals(2, connects.get(), "connected once more after a window came back closed unserved");
            }
            out.table.close();
            assertEquals(0, pool.stats().inUseBuffers(), "every buffer back");
        }
    }
}
