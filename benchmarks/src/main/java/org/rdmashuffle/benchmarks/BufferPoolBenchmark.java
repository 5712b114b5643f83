package org.rdmashuffle.benchmarks;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.infra.Blackhole;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.tcp.TcpNode;

/**
 * A registered buffer from the pool (acquire + release) against what it replaces: a fresh direct
 * buffer registered with the node and deregistered after use. Run with {@code -prof gc}: the pool
 * path must allocate 0 bytes per operation.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class BufferPoolBenchmark {
    @Param({"65536"})
    public int bufferBytes;

    /** {@code disabled} is the hot path alone; {@code sampled} (the default) tracks one acquire in 128. */
    @Param({"disabled", "sampled"})
    public String leakDetection;

    private TcpNode node;
    private BufferPool pool;

    @Setup(Level.Trial)
    public void setUp() throws Exception {
        RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.pool.leakDetection", leakDetection));
        node = new TcpNode(conf, NodeOptions.loopback());
        pool = new BufferPool(BufferPoolOptions.from(conf), node.sinkRegistrar());
        pool.acquire(bufferBytes).release(); // registers the chunk once
    }

    @Benchmark
    public int pooledAcquireRelease(Blackhole bh) {
        RegisteredBuffer b = pool.acquire(bufferBytes);
        bh.consume(b.byteBuffer());
        b.release();
        return b.capacity();
    }

    @Benchmark
    public int allocateDirectAndRegister(Blackhole bh) throws Exception {
        ByteBuffer b = ByteBuffer.allocateDirect(bufferBytes);
        MemoryRegion r = node.register(b, RegionAccess.READ_SINK);
        bh.consume(r.descriptor());
        r.close();
        return b.capacity();
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        pool.close();
        node.close();
    }
}
