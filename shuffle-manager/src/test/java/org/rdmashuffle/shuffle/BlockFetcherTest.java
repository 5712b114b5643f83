package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;

class BlockFetcherTest {
    private static final RdmaShuffleConf CONF = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
            "spark.shuffle.rdma.pool.leakDetection", "paranoid"));
    private static final int MAPS = 6;
    private static final int PARTS = 5;

    private byte[][] data = new byte[MAPS][];
    private long[][] offsets = new long[MAPS][];

    private ShuffleOutputTable publish(RdmaNode executor, Path dir) throws Exception {
        SplittableRandom rnd = new SplittableRandom(21);
        ShuffleOutputTable table = new ShuffleOutputTable(executor, 3, MAPS + 1); // index MAPS stays empty
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

    @Test
    @Timeout(60)
    void shouldDeliverEveryRangeByteForByteWithinTheInFlightBound(@TempDir Path dir) throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             ShuffleOutputTable table = publish(executor, dir);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 300_000, 64 << 10, 20_000)) {
            Map<String, BlockFetcher.Request> wanted = new HashMap<>();
            for (int m = 0; m < MAPS; m++) {
                for (int[] range : new int[][] {{0, 1}, {1, 3}, {2, 3}, {0, PARTS}, {3, 5}}) {
                    BlockFetcher.Request r = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), m, m,
                            range[0], range[1]);
                    wanted.put(m + ":" + range[0] + "-" + range[1], r);
                    fetcher.add(r);
                }
            }
            long largest = 0;
            for (int m = 0; m < MAPS; m++) {
                largest = Math.max(largest, offsets[m][PARTS]);
            }
            int got = 0;
            long maxSeen = 0;
            while (fetcher.outstanding() > 0) {
                maxSeen = Math.max(maxSeen, fetcher.bytesInFlight());
                try (BlockFetcher.Block b = fetcher.next()) {
                    BlockFetcher.Request r = b.request();
                    int from = (int) offsets[r.mapIndex()][r.startPartition()];
                    int to = (int) offsets[r.mapIndex()][r.endPartition()];
                    assertEquals(to - from, b.length());
                    assertEquals(-1, b.bytes().mismatch(ByteBuffer.wrap(data[r.mapIndex()], from, to - from)),
                            "bytes of " + r);
                    got++;
                }
            }
            assertEquals(wanted.size(), got);
            assertTrue(maxSeen <= Math.max(300_000, largest), "in flight " + maxSeen);
            assertEquals(0, fetcher.bytesInFlight());
            assertEquals(0, pool.stats().inUseBuffers());
            assertEquals(0, pool.stats().leaksDetected());
        }
    }

    @Test
    @Timeout(60)
    void shouldFailNamingTheMapWhenOutputIsMissingOrPeerIsGone(@TempDir Path dir) throws Exception {
        try (RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 1 << 20, 64 << 10, 20_000)) {
            RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
            ShuffleOutputTable table = publish(executor, dir);
            BlockFetcher.Request missing = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), MAPS, -1,
                    0, 1);
            fetcher.add(missing);
            FetchFailure f = assertThrows(FetchFailure.class, fetcher::next);
            assertEquals(missing, f.request());
            assertTrue(f.getMessage().contains("map output not registered"), f.getMessage());
            assertTrue(f.getMessage().contains("map index " + MAPS), f.getMessage());

            BlockFetcher.Request good = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 1, 1, 0, 1);
            fetcher.add(good);
            fetcher.next().close();
            table.close();
            executor.close();
            BlockFetcher.Request lost = new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 1, 1, 1, 3);
            fetcher.add(lost); // metadata is cached, so this goes straight to the (gone) peer's data
            FetchFailure g = assertThrows(FetchFailure.class, fetcher::next);
            assertEquals(lost, g.request());
            assertEquals(0, fetcher.bytesInFlight());
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }
}
