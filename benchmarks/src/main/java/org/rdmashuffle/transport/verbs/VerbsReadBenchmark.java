package org.rdmashuffle.transport.verbs;

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
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The verbs provider's steady READ path over {@link EmulatedVerbs} (a device emulated in the JVM, from the
 * transport's test jar): one operation posts {@link #READS_PER_OP} READs of {@code readBytes} as one batch
 * on one channel and waits for all of them. The channel keeps its READ window full from the completion
 * thread (queue, chains, selective signaling, ring of outstanding slots), which is what this measures;
 * {@code -prof gc} gives the bytes allocated per operation by the channel and the emulated device
 * together (the device's share does not change when the channel does). Not a measure of a real NIC.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
public class VerbsReadBenchmark {
    public static final int READS_PER_OP = 256;
    private static final int SERVED_BYTES = 16 << 20;

    @Param({"4096", "65536"})
    public int readBytes;

    private VerbsNode server;
    private VerbsNode client;
    private MemoryRegion served;
    private BufferPool pool;
    private RdmaChannel channel;
    private RegisteredBuffer[] sinks;
    private final ReadBatch batch = new ReadBatch(READS_PER_OP);
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
        RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "verbs",
                "spark.shuffle.rdma.verbs.maxQpReadAtoms", "16",
                "spark.shuffle.rdma.verbs.completionQueueSize", "256",
                "spark.shuffle.rdma.pool.leakDetection", "disabled"));
        EmulatedVerbs verbs = new EmulatedVerbs();
        server = new VerbsNode(conf, NodeOptions.loopback(), verbs.choice());
        client = new VerbsNode(conf, NodeOptions.loopback(), verbs.choice());
        ByteBuffer content = ByteBuffer.allocateDirect(SERVED_BYTES);
        for (int i = 0; i < SERVED_BYTES; i += 8) {
            content.putLong(i, i * 0x9E3779B97F4A7C15L);
        }
        served = server.register(content, RegionAccess.REMOTE_READ);
        d = served.descriptor();
        pool = new BufferPool(BufferPoolOptions.from(conf), client.sinkRegistrar());
        sinks = new RegisteredBuffer[64];
        for (int i = 0; i < sinks.length; i++) {
            sinks[i] = pool.acquire(readBytes);
        }
        channel = client.connect(server.localAddress());
        waiter.owner = Thread.currentThread();
    }

    @Benchmark
    public int readBatch(Blackhole bh) throws Exception {
        batch.clear();
        for (int i = 0; i < READS_PER_OP; i++) {
            long off = ((long) i * readBytes) % SERVED_BYTES;
            batch.add(d.address() + off, d.rkey(), readBytes, sinks[i % sinks.length], 0, i);
        }
        waiter.owner = Thread.currentThread();
        waiter.pending.set(READS_PER_OP);
        channel.post(batch, waiter);
        waiter.await();
        if (waiter.errors != 0) {
            throw new IllegalStateException(waiter.errors + " READs failed");
        }
        bh.consume(sinks[0].byteBuffer().getLong(0));
        return READS_PER_OP;
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
