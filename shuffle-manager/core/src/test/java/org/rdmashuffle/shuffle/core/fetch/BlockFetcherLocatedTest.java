package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.CONF;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.MAPS;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.PARTS;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * Requests whose location the peer said beforehand ({@link BlockFetcher.Located}, as a MapReduce REGISTER reply
 * carries it): READ at once, no slot or metadata; a location whose regions were deregistered since READs nothing.
 */
class BlockFetcherLocatedTest {
    /** The map outputs' regions, as {@link FetcherFixtures#publish} registers them. */
    private static final long REGION_BYTES = 100_000;

    /** Where partition {@code p} of map {@code m} lies in {@code table}'s registered output, as a service says it. */
    private static BlockFetcher.Located locate(RegisteredOutputTable table, long[][] offsets, int m, int p) {
        RegionDescriptor[] file = table.dataRegions(m, m);
        long start = offsets[m][p];
        long length = offsets[m][p + 1] - start;
        if (length == 0) {
            return new BlockFetcher.Located(new RegionDescriptor[0], REGION_BYTES, 0, 0);
        }
        int first = (int) (start / REGION_BYTES);
        int last = (int) ((start + length - 1) / REGION_BYTES);
        return new BlockFetcher.Located(Arrays.copyOfRange(file, first, last + 1), REGION_BYTES,
                start - first * REGION_BYTES, length);
    }

    @Test
    @Timeout(60)
    void shouldReadEveryPartitionWhereItsLocationSaysWithoutReadingTheTable(@TempDir Path dir) throws Exception {
        withPublished(dir, (executor, table, pool, fetcher, data, offsets) -> {
            List<BlockFetcher.Request> requests = new ArrayList<>();
            boolean crossing = false;
            for (int m = 0; m < MAPS; m++) {
                for (int p = 0; p < PARTS; p++) {
                    BlockFetcher.Located at = locate(table, offsets, m, p);
                    crossing |= at.regions().length > 1;
                    long bytes = offsets[m][p + 1] - offsets[m][p];
                    requests.add(new BlockFetcher.Request(executor.localAddress(), table.descriptor(), m, m, p, p + 1,
                            new BlockFetcher.Expected(PARTS, bytes, bytes), at));
                }
            }
            assertTrue(crossing, "some partition crosses a region boundary");
            fetcher.addAll(requests);
            int got = 0;
            while (fetcher.outstanding() > 0) {
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
            assertEquals(requests.size(), got);
            assertEquals(0, fetcher.controlBytesRead(), "no slot, no metadata: the data READs only");
            assertEquals(0, fetcher.bytesInFlight());
        });
    }

    @Test
    @Timeout(60)
    void shouldReadNothingThroughTheLocationOfAnOutputDeregisteredSince(@TempDir Path dir) throws Exception {
        withPublished(dir, (executor, table, pool, fetcher, data, offsets) -> {
            BlockFetcher.Located at = locate(table, offsets, 0, 0);
            assertNotNull(table.dataRegions(0, 0));
            assertEquals(null, table.dataRegions(0, 7), "no regions for an attempt the table does not hold");
            // (a lent output replaced by another attempt stays registered until the table closes: ShuffleOutputTableTest)
            table.close(); // the job stopped: its outputs' regions are deregistered
            assertEquals(null, table.dataRegions(0, 0));
            long bytes = at.length();
            fetcher.add(new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, 0, 1,
                    new BlockFetcher.Expected(PARTS, bytes, bytes), at));
            try (BlockFetcher.Block b = fetcher.next()) {
                assertTrue(b.unregistered(), "a stale location READs nothing");
                assertTrue(b.viaEngineReason().contains("deregistered"), b.viaEngineReason());
            }
            assertEquals(0, pool.stats().inUseBuffers());
        });
    }

    @Test
    void shouldRefuseALocatedRequestOfMoreThanOnePartition() {
        BlockFetcher.Located at = new BlockFetcher.Located(new RegionDescriptor[] {new RegionDescriptor(0, 10, 1)},
                10, 0, 10);
        assertThrows(IllegalArgumentException.class, () -> new BlockFetcher.Request(null, null, 0, 0, 0, 2,
                BlockFetcher.Expected.UNKNOWN, at));
    }

    /** What a test does with {@link #MAPS} published outputs ({@code data}, {@code offsets}), a pool, a fetcher. */
    private interface PublishedBody {
        void run(RdmaNode executor, RegisteredOutputTable table, BufferPool pool, BlockFetcher fetcher, byte[][] data,
                 long[][] offsets) throws Exception;
    }

    /** An executor's node with {@link #MAPS} outputs published; a reducer's node, pool and fetcher; {@code body}. */
    private static void withPublished(Path dir, PublishedBody body) throws Exception {
        byte[][] data = new byte[MAPS][];
        long[][] offsets = new long[MAPS][];
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             RegisteredOutputTable table = FetcherFixtures.publish(executor, dir, data, offsets);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar());
             BlockFetcher fetcher = new BlockFetcher(reducer, pool, 300_000, 64 << 10, 20_000)) {
            body.run(executor, table, pool, fetcher, data, offsets);
        }
    }
}
