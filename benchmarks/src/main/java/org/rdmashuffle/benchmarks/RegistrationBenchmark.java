package org.rdmashuffle.benchmarks;

import java.io.IOException;
import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Comparator;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.Blackhole;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.serve.RegisteredMapOutput;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.verbs.EmulatedVerbsNodes;

/**
 * What registering and deregistering map outputs costs against how many a node holds: {@code outputs} committed
 * map outputs (small real files, one each) published into one shuffle's output table on one node, as
 * {@code MapOutputServer.publish} does it (the file mapped and registered as its layout's regions, its metadata
 * registered, its slot written), then the shuffle's table closed, as {@code unregisterShuffle} and a job stop do
 * it (every output withdrawn, deregistered and unmapped). Each measured operation is one whole pass over the
 * outputs: divide by {@code outputs} for the time per output ({@code benchmarks/registration.sh} does).
 *
 * <p>{@code tcp} is the tcp provider's node; {@code emulated-verbs} the verbs provider's node over the device its
 * tests emulate in the JVM (no NIC: the provider's own bookkeeping, not the kernel's pinning).
 *
 * <p>Each output is one file mapping: at 100,000 outputs the process needs more than Linux's default
 * {@code vm.max_map_count} (65,530) mappings. The setup refuses to start below what it needs, saying so.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 3)
@Measurement(iterations = 5)
@Fork(value = 1, jvmArgsAppend = {"-Xms2g", "-Xmx2g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"})
public class RegistrationBenchmark {
    /** Partitions of each map output, and bytes of each partition: a 4 KiB file, one page. */
    static final int PARTITIONS = 4;
    static final int PARTITION_BYTES = 1024;
    /** Mappings the JVM itself needs beside the outputs' (a few thousand; generous). */
    static final int JVM_MAPPINGS = 10_000;

    @Param({"1000", "10000", "100000"})
    public int outputs;

    @Param({"tcp", "emulated-verbs"})
    public String provider;

    RdmaShuffleConf conf;
    RdmaNode node;
    Path dir;
    Path[] files;
    long[] offsets;
    private int shuffleId;

    @Setup(Level.Trial)
    public void open() throws IOException {
        long maxMaps = maxMapCount();
        if (maxMaps >= 0 && maxMaps < outputs + JVM_MAPPINGS) {
            throw new IllegalStateException("vm.max_map_count is " + maxMaps + ": " + outputs + " registered outputs"
                    + " need one file mapping each, beside the JVM's own. Raise it for this run, e.g."
                    + " sysctl -w vm.max_map_count=" + Math.max(262_144, 2 * (outputs + JVM_MAPPINGS)));
        }
        String p = provider.equals("tcp") ? "tcp" : "verbs";
        conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", p));
        node = provider.equals("tcp") ? RdmaTransport.open(conf, NodeOptions.loopback())
                : EmulatedVerbsNodes.open(conf, NodeOptions.loopback());
        dir = Files.createTempDirectory("registration-benchmark");
        files = new Path[outputs];
        ByteBuffer bytes = ByteBuffer.allocate(PARTITIONS * PARTITION_BYTES);
        for (int i = 0; i < outputs; i++) {
            files[i] = dir.resolve("shuffle_0_" + i + "_0.data");
            bytes.clear().putInt(0, i);
            try (FileChannel fc = FileChannel.open(files[i], StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
                while (bytes.hasRemaining()) {
                    fc.write(bytes);
                }
            }
        }
        offsets = new long[PARTITIONS + 1];
        for (int q = 0; q <= PARTITIONS; q++) {
            offsets[q] = (long) q * PARTITION_BYTES;
        }
    }

    @TearDown(Level.Trial)
    public void close() throws IOException {
        node.close();
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path f : (Iterable<Path>) s.sorted(Comparator.reverseOrder())::iterator) {
                Files.delete(f);
            }
        }
    }

    RegisteredOutputTable newTable() throws IOException {
        return new RegisteredOutputTable(node, shuffleId++, outputs, null);
    }

    /** Map output {@code i} registered and published, as {@code MapOutputServer.publish} registers one. */
    void publish(RegisteredOutputTable table, int i) throws IOException {
        MapOutputLayout layout = new MapOutputLayout(offsets, conf.maxRegionSizeBytes());
        table.publish(i, i, RegisteredMapOutput.register(node, files[i], layout, table.realm()));
    }

    /** An empty output table for {@link #register}, closed (its outputs deregistered) after each pass. */
    @State(Scope.Benchmark)
    public static class EmptyTable {
        RegisteredOutputTable table;

        @Setup(Level.Invocation)
        public void open(RegistrationBenchmark b) throws IOException {
            table = b.newTable();
        }

        @TearDown(Level.Invocation)
        public void close() {
            table.close();
        }
    }

    /** An output table holding every output, for {@link #deregister}; measures what they hold once per trial. */
    @State(Scope.Benchmark)
    public static class FullTable {
        RegisteredOutputTable table;
        private boolean measured;

        @Setup(Level.Invocation)
        public void open(RegistrationBenchmark b) throws IOException {
            Footprint before = measured ? null : Footprint.now();
            table = b.newTable();
            for (int i = 0; i < b.outputs; i++) {
                b.publish(table, i);
            }
            if (!measured) {
                measured = true;
                System.out.println(Footprint.now().perOutputSince(before, b.outputs, b.provider));
            }
        }

        @TearDown(Level.Invocation)
        public void close() {
            table.close(); // idempotent: deregister() closed it
        }
    }

    /** Registers and publishes every output into an empty table. */
    @Benchmark
    public void register(EmptyTable t, Blackhole bh) throws IOException {
        for (int i = 0; i < outputs; i++) {
            publish(t.table, i);
        }
        bh.consume(t.table);
    }

    /** Withdraws, deregisters and unmaps every output of a full table, then the table. */
    @Benchmark
    public void deregister(FullTable t) {
        t.table.close();
    }

    static long maxMapCount() {
        try {
            // Not Files.readString: a /proc file's size is 0, and what it reads then is not the file.
            try (Stream<String> lines = Files.lines(Path.of("/proc/sys/vm/max_map_count"))) {
                return Long.parseLong(lines.findFirst().orElse("-1").trim());
            }
        } catch (IOException | RuntimeException e) {
            return -1; // not Linux: no such limit to check
        }
    }

    /** What the process holds now: heap after a full GC, direct and mapped buffers, mappings. */
    record Footprint(long heapBytes, long directBytes, long directCount, long mappedBytes, long mappedCount,
                     long mappings) {
        static Footprint now() {
            for (int i = 0; i < 3; i++) {
                System.gc();
            }
            Runtime rt = Runtime.getRuntime();
            long heap = rt.totalMemory() - rt.freeMemory();
            long dBytes = 0, dCount = 0, mBytes = 0, mCount = 0;
            for (BufferPoolMXBean p : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
                if (p.getName().equals("direct")) {
                    dBytes = p.getMemoryUsed();
                    dCount = p.getCount();
                } else if (p.getName().equals("mapped")) {
                    mBytes = p.getMemoryUsed();
                    mCount = p.getCount();
                }
            }
            long maps;
            try (Stream<String> lines = Files.lines(Path.of("/proc/self/maps"))) {
                maps = lines.count();
            } catch (IOException | RuntimeException e) {
                maps = -1;
            }
            return new Footprint(heap, dBytes, dCount, mBytes, mCount, maps);
        }

        String perOutputSince(Footprint b, int n, String provider) {
            return String.format("%nregistration footprint, %s, %d outputs held: per output %.0f B of heap, %.0f B in"
                    + " %.2f direct buffers, %.0f B in %.2f mapped buffers, %.2f mappings (/proc/self/maps)",
                    provider, n, (heapBytes - b.heapBytes) / (double) n, (directBytes - b.directBytes) / (double) n,
                    (directCount - b.directCount) / (double) n, (mappedBytes - b.mappedBytes) / (double) n,
                    (mappedCount - b.mappedCount) / (double) n, (mappings - b.mappings) / (double) n);
        }
    }
}
