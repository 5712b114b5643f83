package org.rdmashuffle.transport.verbs;

import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * READ throughput of the verbs provider, shaped like {@code ib_read_bw}: one channel between two nodes,
 * {@code inflight} READs of {@code size} bytes kept outstanding (each completion posts the next, from
 * the completion thread), {@code iterations} READs timed after a warm-up of a quarter as many (the JIT needs it, more so under emulation). Prints one
 * {@code RESULT} line in MiB/s (the unit of ib_read_bw's "MB/sec").
 *
 * <p>Usage: {@code VerbsReadThroughput <host> <size> <iterations> <inflight>}; needs libdisni on
 * {@code java.library.path} and an RDMA device at {@code host}. Run by {@code benchmarks/verbs-vm/run.sh}.
 * Other {@code spark.shuffle.rdma.*} keys can be given as system properties.
 */
public final class VerbsReadThroughput {
    private VerbsReadThroughput() {
    }

    public static void main(String[] args) throws Exception {
        String host = args[0];
        int size = Integer.parseInt(args[1]);
        int iterations = Integer.parseInt(args[2]);
        int inflight = Integer.parseInt(args[3]);
        int slots = Math.max(inflight, 1);
        Map<String, String> settings = new HashMap<>();
        System.getProperties().forEach((k, v) -> {
            if (k.toString().startsWith(RdmaShuffleConf.PREFIX)) {
                settings.put(k.toString(), v.toString());
            }
        });
        settings.putAll(Map.of("spark.shuffle.rdma.provider", "verbs",
                "spark.shuffle.rdma.verbs.maxQpReadAtoms", Integer.toString(inflight),
                "spark.shuffle.rdma.maxReadsInFlightPerPeer", Integer.toString(inflight)));
        RdmaShuffleConf conf = new RdmaShuffleConf(settings);
        NodeOptions options = new NodeOptions(host, host, ControlHandler.NONE, null);
        int servedBytes = Math.max(size * 8, 8 << 20);
        try (RdmaNode server = new VerbsNode(conf, options); RdmaNode client = new VerbsNode(conf, options)) {
            ByteBuffer served = ByteBuffer.allocateDirect(servedBytes);
            for (int i = 0; i < servedBytes; i += 8) {
                served.putLong(i, i * 0x9E3779B97F4A7C15L);
            }
            MemoryRegion region = server.register(served, RegionAccess.REMOTE_READ);
            ByteBuffer sinkMemory = ByteBuffer.allocateDirect(size * slots);
            MemoryRegion sink = client.register(sinkMemory, RegionAccess.READ_SINK);
            RdmaChannel ch = client.connect(server.localAddress());
            System.out.println("CONNECTION " + ((VerbsChannel) ch).connectionParameters());
            RegionDescriptor d = region.descriptor();
            int positions = servedBytes / size;

            Run warm = new Run(ch, d, sink, size, slots, positions, Math.max(slots, iterations / 4));
            warm.go();
            Run timed = new Run(ch, d, sink, size, slots, positions, iterations);
            long t0 = System.nanoTime();
            timed.go();
            long ns = System.nanoTime() - t0;
            // The sink holds what the last READs brought: compare one slot with the served bytes.
            int lastPos = (int) ((iterations - 1) % positions);
            int lastSlot = (int) ((iterations - 1) % slots);
            ByteBuffer expect = served.duplicate().position(lastPos * size).limit(lastPos * size + size);
            ByteBuffer got = sinkMemory.duplicate().position(lastSlot * size).limit(lastSlot * size + size);
            if (expect.mismatch(got) != -1) {
                throw new IllegalStateException("READ data differs from the served bytes");
            }
            double mib = (double) size * iterations / (1 << 20) / (ns / 1e9);
            System.out.printf("RESULT verbs-read size=%d iterations=%d inflight=%d seconds=%.2f MiB/s=%.1f%n", size,
                    iterations, inflight, ns / 1e9, mib);
            sink.close();
            region.close();
        }
    }

    /** Keeps {@code slots} READs outstanding until {@code total} have completed. */
    private static final class Run implements ReadListener {
        private final RdmaChannel ch;
        private final RegionDescriptor d;
        private final MemoryRegion sink;
        private final int size;
        private final int slots;
        private final int positions;
        private final int total;
        private final AtomicLong posted = new AtomicLong();
        private final AtomicInteger done = new AtomicInteger();
        private final CountDownLatch finished = new CountDownLatch(1);
        private final ReadBatch one = new ReadBatch(1);
        private volatile String failure;

        Run(RdmaChannel ch, RegionDescriptor d, MemoryRegion sink, int size, int slots, int positions, int total) {
            this.ch = ch;
            this.d = d;
            this.sink = sink;
            this.size = size;
            this.slots = slots;
            this.positions = positions;
            this.total = total;
        }

        void go() throws Exception {
            ReadBatch first = new ReadBatch(slots);
            for (int i = 0; i < Math.min(slots, total); i++) {
                long n = posted.getAndIncrement();
                first.add(d.address() + (n % positions) * size, d.rkey(), size, sink, (int) (n % slots) * size, n);
            }
            ch.post(first, this);
            if (!finished.await(30, TimeUnit.MINUTES)) {
                throw new IllegalStateException("READs did not finish");
            }
            if (failure != null) {
                throw new IllegalStateException(failure);
            }
        }

        @Override
        public void onReadComplete(long requestId, int status, int lengthBytes) {
            if (status != ReadStatus.SUCCESS) {
                failure = "READ " + requestId + " failed: " + ReadStatus.describe(status);
                finished.countDown();
                return;
            }
            if (done.incrementAndGet() == total) {
                finished.countDown();
                return;
            }
            long n = posted.getAndIncrement();
            if (n < total) {
                synchronized (one) {
                    one.clear();
                    one.add(d.address() + (n % positions) * size, d.rkey(), size, sink, (int) (n % slots) * size, n);
                    try {
                        ch.post(one, this);
                    } catch (Exception e) {
                        failure = e.toString();
                        finished.countDown();
                    }
                }
            }
        }
    }
}
