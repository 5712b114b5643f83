package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.serve.RegisteredMapOutput;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.TransportException;

/** Fixtures the {@link BlockFetcher} tests share: configuration, published map outputs, a gated channel. */
final class FetcherFixtures {
    private FetcherFixtures() {
    }

    /** The TCP provider, with paranoid leak detection in every pool. */
    static final RdmaShuffleConf CONF = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
            "spark.shuffle.rdma.pool.leakDetection", "paranoid"));

    static final int MAPS = 6;
    static final int PARTS = 5;

    /**
     * Publishes {@link #MAPS} map outputs of {@link #PARTS} partitions of random bytes (partition 1 empty), their
     * bytes and offsets filled into {@code data} and {@code offsets}; index {@code MAPS} of the table stays empty.
     */
    static RegisteredOutputTable publish(RdmaNode executor, Path dir, byte[][] data, long[][] offsets)
            throws Exception {
        SplittableRandom rnd = new SplittableRandom(21);
        RegisteredOutputTable table = new RegisteredOutputTable(executor, 3, MAPS + 1); // index MAPS stays empty
        for (int m = 0; m < MAPS; m++) {
            offsets[m] = new long[PARTS + 1];
            for (int p = 1; p <= PARTS; p++) {
                offsets[m][p] = offsets[m][p - 1] + (p == 2 ? 0 : rnd.nextInt(200_000));
            }
            data[m] = new byte[(int) offsets[m][PARTS]];
            rnd.nextBytes(data[m]);
            Path f = dir.resolve("shuffle_3_" + m + "_0.data");
            Files.write(f, data[m]);
            table.publish(m, m, RegisteredMapOutput.register(executor, f, new MapOutputLayout(offsets[m], 100_000)));
        }
        return table;
    }

    /** Map outputs of random bytes, published in one output table. */
    static final class Outputs {
        final byte[][] data;
        final long[][] offsets;
        final RegisteredOutputTable table;

        Outputs(RdmaNode executor, Path dir, int shuffleId, int maps, int parts, int maxPartBytes, long seed)
                throws Exception {
            SplittableRandom rnd = new SplittableRandom(seed);
            data = new byte[maps][];
            offsets = new long[maps][];
            table = new RegisteredOutputTable(executor, shuffleId, maps);
            for (int m = 0; m < maps; m++) {
                offsets[m] = new long[parts + 1];
                for (int p = 1; p <= parts; p++) {
                    offsets[m][p] = offsets[m][p - 1] + rnd.nextInt(maxPartBytes + 1);
                }
                data[m] = new byte[(int) offsets[m][parts]];
                rnd.nextBytes(data[m]);
                Path f = dir.resolve("shuffle_" + shuffleId + "_" + m + "_0.data");
                Files.write(f, data[m]);
                table.publish(m, m, RegisteredMapOutput.register(executor, f, new MapOutputLayout(offsets[m], 1 << 30)));
            }
        }

        BlockFetcher.Request request(NodeAddress peer, int map, int start, int end) {
            return new BlockFetcher.Request(peer, table.descriptor(), map, map, start, end);
        }

        void assertBytes(BlockFetcher.Block b) {
            BlockFetcher.Request r = b.request();
            int from = (int) offsets[r.mapIndex()][r.startPartition()];
            int to = (int) offsets[r.mapIndex()][r.endPartition()];
            assertEquals(to - from, b.length(), "length of " + r);
            assertEquals(-1, b.bytes().mismatch(ByteBuffer.wrap(data[r.mapIndex()], from, to - from)), "bytes of " + r);
        }
    }

    /** Polls {@code condition} every 10 ms until it holds or {@code seconds} have passed. */
    static boolean eventually(int seconds, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                return false;
            }
            Thread.sleep(10);
        }
        return true;
    }

    /**
     * A channel whose READs go over the real one, but whose completions reach the fetcher only when the
     * test releases them, post by post.
     */
    static final class GatedChannel implements RdmaChannel {
        /** One post: its listener and the completions the real channel delivered for it. */
        static final class Post {
            final ReadListener listener;
            final int reads;
            final List<long[]> completions = new ArrayList<>();

            Post(ReadListener listener, int reads) {
                this.listener = listener;
                this.reads = reads;
            }
        }

        private final RdmaChannel real;
        final List<Post> posts = new ArrayList<>();

        GatedChannel(RdmaChannel real) {
            this.real = real;
        }

        @Override
        public NodeAddress peer() {
            return real.peer();
        }

        @Override
        public void post(ReadBatch batch, ReadListener listener) throws TransportException {
            Post p = new Post(listener, batch.size());
            synchronized (this) {
                posts.add(p);
            }
            real.post(batch, (id, st, len) -> {
                synchronized (p) {
                    p.completions.add(new long[] {id, st, len});
                }
            });
        }

        synchronized int postCount() {
            return posts.size();
        }

        /** Waits until every READ of post {@code i} completed on the real channel (its bytes landed). */
        Post awaitLanded(int i) throws InterruptedException {
            Post p;
            synchronized (this) {
                p = posts.get(i);
            }
            assertTrue(eventually(60, () -> {
                synchronized (p) {
                    return p.completions.size() == p.reads;
                }
            }), "post " + i + " never completed");
            return p;
        }

        /** Hands post {@code i}'s completions to the fetcher, once they all came. */
        void release(int i) throws InterruptedException {
            Post p = awaitLanded(i);
            for (long[] c : p.completions) {
                p.listener.onReadComplete(c[0], (int) c[1], (int) c[2]);
            }
        }

        @Override
        public CompletableFuture<ByteBuffer> call(ByteBuffer request) {
            return real.call(request);
        }

        @Override
        public boolean isOpen() {
            return real.isOpen();
        }

        @Override
        public void close() {
            real.close();
        }
    }

    /** {@code node}, but every channel it connects is {@code gate} (over the real channel). */
    static RdmaNode gatedNode(RdmaNode node, GatedChannel[] gate) {
        return (RdmaNode) Proxy.newProxyInstance(RdmaNode.class.getClassLoader(), new Class<?>[] {RdmaNode.class},
                (proxy, method, args) -> {
                    try {
                        Object result = method.invoke(node, args);
                        if (method.getName().equals("connect")) {
                            if (gate[0] == null) {
                                gate[0] = new GatedChannel((RdmaChannel) result);
                            }
                            return gate[0];
                        }
                        return result;
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
    }
}
