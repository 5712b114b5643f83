package org.rdmashuffle.benchmarks;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
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
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.tcp.TcpNode;

/**
 * tcp provider READ throughput on loopback: one operation reads {@link #BYTES_PER_OP} as READs of
 * {@code readBytes} each (posted as one batch; the channel keeps its window full) into pooled
 * registered buffers. Compare with {@link NioSocketBenchmark} at the same sizes.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
public class TcpReadBenchmark {
    public static final int BYTES_PER_OP = 16 << 20;
    private static final int SERVED_BYTES = 64 << 20;

    @Param({"65536", "1048576"})
    public int readBytes;

    private RdmaNode server;
    private RdmaNode client;
    private MemoryRegion served;
    private BufferPool pool;
    private RdmaChannel channel;
    private RegisteredBuffer[] sinks;
    private final ReadBatch batch = new ReadBatch(1024);
    private final Waiter waiter = new Waiter();
    private RegionDescriptor d;

    /** Counts completions and wakes the benchmark thread; allocates nothing. */
    static final class Waiter implements ReadListener {
        final AtomicInteger pending = new AtomicInteger();
        volatile Thread owner;
        volatile int errors;

        @Override
        public void onReadComplete(long requestId, int status, int lengthBytes) {
            if (status != ReadStatus.SUCCESS) {
                errors++;
            }
            if (pending.decrementAndGet() == 0) {
                LockSupport.unpark(owner);
            }
        }

        void await() {
            while (pending.get() > 0) {
                LockSupport.parkNanos(this, 1_000_000L);
            }
        }
    }

    @Setup(Level.Trial)
    public void setUp() throws Exception {
        RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.pool.leakDetection", "disabled"));
        server = new TcpNode(conf, NodeOptions.loopback());
        client = new TcpNode(conf, NodeOptions.loopback());
        ByteBuffer content = ByteBuffer.allocateDirect(SERVED_BYTES);
        for (int i = 0; i < SERVED_BYTES; i += 8) {
            content.putLong(i, i * 0x9E3779B97F4A7C15L);
        }
        served = server.register(content, RegionAccess.REMOTE_READ);
        d = served.descriptor();
        pool = new BufferPool(BufferPoolOptions.from(conf), client.sinkRegistrar());
        int n = BYTES_PER_OP / readBytes;
        sinks = new RegisteredBuffer[Math.min(n, 64)];
        for (int i = 0; i < sinks.length; i++) {
            sinks[i] = pool.acquire(readBytes);
        }
        channel = client.connect(server.localAddress());
        waiter.owner = Thread.currentThread();
    }

    @Benchmark
    public int readSixteenMiB(Blackhole bh) throws Exception {
        int n = BYTES_PER_OP / readBytes;
        batch.clear();
        for (int i = 0; i < n; i++) {
            long off = ((long) i * readBytes) % SERVED_BYTES;
            batch.add(d.address() + off, d.rkey(), readBytes, sinks[i % sinks.length], 0, i);
        }
        waiter.owner = Thread.currentThread();
        waiter.pending.set(n);
        channel.post(batch, waiter);
        waiter.await();
        if (waiter.errors != 0) {
            throw new IllegalStateException(waiter.errors + " READs failed");
        }
        bh.consume(sinks[0].byteBuffer().getLong(0));
        return n;
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        for (RegisteredBuffer b : sinks) {
            b.release();
        }
        pool.close();
        served.close();
        client.close();
        server.close();
    }
}
