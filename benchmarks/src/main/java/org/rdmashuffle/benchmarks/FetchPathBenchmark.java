package org.rdmashuffle.benchmarks;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.infra.Blackhole;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.directory.MetadataCache;
import org.rdmashuffle.shuffle.core.serve.RegisteredMapOutput;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;

/**
 * The reduce side's fetch path over the tcp provider on loopback, one block at a time: a serving node
 * with three registered map outputs, a fetching node with a pool and one {@link BlockFetcher} (its
 * metadata cache warm, as after a reduce task's first request to each output). Run with
 * {@code -prof gc}: {@code gc.alloc.rate.norm} is what the fetcher allocates per block or run, the
 * figure this benchmark exists for; its times are latencies of one request at a time on a shared
 * machine, not throughput claims.
 *
 * <pre>
 * java -jar benchmarks/target/benchmarks.jar FetchPathBenchmark -f 1 -wi 3 -w 2s -i 5 -r 2s -prof gc
 * </pre>
 *
 * <ul>
 *   <li>{@code cachedBlock64KiB}: one partition of 64 KiB (an offsets-window READ, then the data READ);
 *   <li>{@code run8Partitions8KiB}: 8 contiguous partitions of 8 KiB in one request (one block);
 *   <li>{@code streamedBlock4MiB}: a 4 MiB block through a pool whose largest buffer is 256 KiB, read
 *       through {@link BlockFetcher.Block#open} into a reused array.
 * </ul>
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
public class FetchPathBenchmark {
    private static final int SMALL_PARTS = 64;
    private static final int SMALL = 64 << 10;
    private static final int RUN_PARTS = 64;
    private static final int RUN_PART = 8 << 10;
    private static final int STREAMED = 4 << 20;

    private Path dir;
    private RdmaNode server;
    private RdmaNode client;
    private RegisteredOutputTable table;
    private BufferPool pool;
    private BlockFetcher fetcher;
    private final byte[] sink = new byte[64 << 10];
    private int next;

    @Setup(Level.Trial)
    public void setUp() throws Exception {
        RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.pool.maxBufferSize", "256k", "spark.shuffle.rdma.pool.chunkSize", "4m"));
        dir = Files.createTempDirectory("fetch-path-bench");
        server = RdmaTransport.open(conf, NodeOptions.loopback());
        client = RdmaTransport.open(conf, NodeOptions.loopback());
        table = new RegisteredOutputTable(server, 1, 3);
        publish(0, SMALL_PARTS, SMALL);
        publish(1, RUN_PARTS, RUN_PART);
        publish(2, 1, STREAMED);
        pool = new BufferPool(BufferPoolOptions.from(conf), client.sinkRegistrar());
        fetcher = new BlockFetcher(client, pool, new MetadataCache(), 48L << 20, conf.maxReadsInFlightPerPeer(),
                1 << 20, 20_000);
        for (int m = 0; m < 3; m++) { // the metadata cache warm for every output
            fetcher.add(new BlockFetcher.Request(server.localAddress(), table.descriptor(), m, m, 0, 1));
            try (BlockFetcher.Block b = fetcher.next()) {
                if (b.length() <= 0) {
                    throw new IllegalStateException("empty block in set-up");
                }
            }
        }
    }

    private void publish(int map, int parts, int partBytes) throws IOException {
        long[] offsets = new long[parts + 1];
        for (int p = 1; p <= parts; p++) {
            offsets[p] = offsets[p - 1] + partBytes;
        }
        byte[] data = new byte[(int) offsets[parts]];
        for (int i = 0; i < data.length; i++) {
            data[i] = (byte) (i * 31 + map);
        }
        Path f = dir.resolve("shuffle_1_" + map + "_0.data");
        Files.write(f, data);
        table.publish(map, map, RegisteredMapOutput.register(server, f, new MapOutputLayout(offsets, 1 << 20)));
    }

    @TearDown(Level.Trial)
    public void tearDown() throws Exception {
        try (Stream<Path> files = Files.walk(dir)) {
            fetcher.close();
            pool.close();
            table.close();
            client.close();
            server.close();
            files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    @Benchmark
    public long cachedBlock64KiB() throws Exception {
        int p = next++ & (SMALL_PARTS - 1);
        fetcher.add(new BlockFetcher.Request(server.localAddress(), table.descriptor(), 0, 0, p, p + 1));
        try (BlockFetcher.Block b = fetcher.next()) {
            return b.length() + b.bytes().get(SMALL - 1);
        }
    }

    @Benchmark
    public long run8Partitions8KiB() throws Exception {
        int start = (next++ & 7) * 8;
        fetcher.add(new BlockFetcher.Request(server.localAddress(), table.descriptor(), 1, 1, start, start + 8));
        try (BlockFetcher.Block b = fetcher.next()) {
            return b.length() + b.offsetOf(start + 7);
        }
    }

    @Benchmark
    public long streamedBlock4MiB(Blackhole bh) throws Exception {
        fetcher.add(new BlockFetcher.Request(server.localAddress(), table.descriptor(), 2, 2, 0, 1));
        long total = 0;
        try (BlockFetcher.Block b = fetcher.next()) {
            if (!b.streamed()) {
                throw new IllegalStateException("a 4 MiB block through 256 KiB buffers was not streamed");
            }
            InputStream in = b.open(0, b.length());
            for (int n; (n = in.read(sink, 0, sink.length)) > 0; ) {
                total += n;
            }
        }
        if (total != STREAMED) {
            throw new IllegalStateException("streamed " + total + " bytes of " + STREAMED);
        }
        bh.consume(sink[sink.length - 1]);
        return total;
    }
}
