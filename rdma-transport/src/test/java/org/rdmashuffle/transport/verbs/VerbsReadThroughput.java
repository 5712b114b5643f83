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
 * the completion thread), {@code iterations} READs timed after a warm-up of a quarter as many (the JIT
 * needs it, more so under emulation). Prints one {@code RESULT} line in MiB/s (the unit of ib_read_bw's
 * "MB/sec"), with the wall-clock bounds of the timed READs.
 *
 * <p>Every READ's bytes are checked, warm-up included: the served memory holds {@code positions} buffers
 * of {@code size} bytes, each filled with its own pattern, and READ {@code n} brings buffer
 * {@code n % positions} into sink slot {@code n % (2 × inflight)}. {@code positions} shares no factor with
 * the number of slots, so a slot never receives the same buffer twice in a row: a READ that wrote
 * nothing, wrote part of its buffer or brought the wrong one leaves bytes that differ. A completion first
 * posts the next READ (into a slot whose previous READ was checked when it completed: completions of one
 * queue pair arrive in order) and then compares its own slot with the served buffer, so the check
 * overlaps the READs in flight. A mismatch fails the run; the line reports how many READs were checked.
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
        // Diagnosis only: -Drdma.bench.check=false leaves the bytes unchecked, to show what checking costs.
        boolean check = Boolean.parseBoolean(System.getProperty("rdma.bench.check", "true"));
        int window = Math.max(inflight, 1);
        int slots = 2 * window;
        int positions = slots + 1;
        while (gcd(positions, slots) != 1) {
            positions++;
        }
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
        long servedBytes = (long) size * positions;
        long sinkBytes = (long) size * slots;
        if (servedBytes > Integer.MAX_VALUE || sinkBytes > Integer.MAX_VALUE || size % 8 != 0) {
            throw new IllegalArgumentException("size must be a multiple of 8 and size × " + positions
                    + " fit in 2 GiB");
        }
        try (RdmaNode server = new VerbsNode(conf, options); RdmaNode client = new VerbsNode(conf, options)) {
            ByteBuffer served = ByteBuffer.allocateDirect((int) servedBytes);
            ByteBuffer[] expected = new ByteBuffer[positions];
            long[] pattern = new long[size / 8]; // filled on the heap, copied in bulk (fewer JIT-compiled calls under TCG)
            for (int p = 0; p < positions; p++) {
                long seed = (p + 1) * 0x9E3779B97F4A7C15L;
                for (int i = 0; i < pattern.length; i++) {
                    pattern[i] = seed ^ ((i * 8L) * 0xC2B2AE3D27D4EB4FL);
                }
                served.slice(p * size, size).asLongBuffer().put(pattern);
                expected[p] = served.slice(p * size, size);
            }
            MemoryRegion region = server.register(served, RegionAccess.REMOTE_READ);
            ByteBuffer sinkMemory = ByteBuffer.allocateDirect((int) sinkBytes);
            ByteBuffer[] received = new ByteBuffer[slots];
            for (int s = 0; s < slots; s++) {
                received[s] = sinkMemory.slice(s * size, size);
            }
            MemoryRegion sink = client.register(sinkMemory, RegionAccess.READ_SINK);
            RdmaChannel ch = client.connect(server.localAddress());
            System.out.println("CONNECTION " + ((VerbsChannel) ch).connectionParameters());
            RegionDescriptor d = region.descriptor();

            Run warm = new Run(ch, d, sink, size, window, slots, positions, Math.max(window, iterations / 4),
                    check ? expected : null, received, 0);
            warm.go();
            Run timed = new Run(ch, d, sink, size, window, slots, positions, iterations,
                    check ? expected : null, received, warm.total);
            long wall0 = System.currentTimeMillis();
            long t0 = System.nanoTime();
            timed.go();
            long ns = System.nanoTime() - t0;
            long wall1 = System.currentTimeMillis();
            long checked = warm.checked.get() + timed.checked.get();
            if (check && checked != warm.total + timed.total) {
                throw new IllegalStateException("checked " + checked + " READs of " + (warm.total + timed.total));
            }
            double mib = (double) size * iterations / (1 << 20) / (ns / 1e9);
            // timed= (wall-clock seconds) lets the harness take the wire's rate over the timed READs only,
            // without the warm-up's
            System.out.printf(java.util.Locale.ROOT, "RESULT verbs-read size=%d iterations=%d inflight=%d checked=%d "
                    + "seconds=%.2f timed=%.3f-%.3f MiB/s=%.1f%n", size, iterations, inflight, checked, ns / 1e9,
                    wall0 / 1e3, wall1 / 1e3, mib);
            sink.close();
            region.close();
        }
    }

    private static int gcd(int a, int b) {
        return b == 0 ? a : gcd(b, a % b);
    }

    /**
     * Keeps {@code window} READs outstanding until {@code total} have completed, READ {@code n} (counted
     * from {@code first}, so that a second run continues the first's slot rotation) going to slot
     * {@code n % slots}; checks each READ's bytes after posting the next.
     */
    private static final class Run implements ReadListener {
        private final RdmaChannel ch;
        private final RegionDescriptor d;
        private final MemoryRegion sink;
        private final int size;
        private final int window;
        private final int slots;
        private final int positions;
        private final int total;
        private final long first;
        /** The served buffers, or null when bytes are not checked. */
        private final ByteBuffer[] expected;
        private final ByteBuffer[] received;
        private final AtomicLong posted = new AtomicLong();
        private final AtomicInteger done = new AtomicInteger();
        private final AtomicLong checked = new AtomicLong();
        private final CountDownLatch finished = new CountDownLatch(1);
        private final ReadBatch one = new ReadBatch(1);
        private volatile String failure;

        Run(RdmaChannel ch, RegionDescriptor d, MemoryRegion sink, int size, int window, int slots, int positions,
            int total, ByteBuffer[] expected, ByteBuffer[] received, long first) {
            this.ch = ch;
            this.d = d;
            this.sink = sink;
            this.size = size;
            this.window = window;
            this.slots = slots;
            this.positions = positions;
            this.total = total;
            this.first = first;
            this.expected = expected;
            this.received = received;
        }

        private void add(ReadBatch batch, long i) {
            long n = first + i;
            batch.add(d.address() + (n % positions) * size, d.rkey(), size, sink, (int) (n % slots) * size, n);
        }

        void go() throws Exception {
            ReadBatch start = new ReadBatch(window);
            for (int i = 0; i < Math.min(window, total); i++) {
                add(start, posted.getAndIncrement());
            }
            ch.post(start, this);
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
                fail("READ " + requestId + " failed: " + ReadStatus.describe(status));
                return;
            }
            long i = posted.getAndIncrement();
            if (i < total) {
                synchronized (one) {
                    one.clear();
                    add(one, i);
                    try {
                        ch.post(one, this);
                    } catch (Exception e) {
                        fail(e.toString());
                        return;
                    }
                }
            }
            int slot = (int) (requestId % slots);
            int position = (int) (requestId % positions);
            if (lengthBytes != size || expected != null && received[slot].mismatch(expected[position]) != -1) {
                fail("READ " + requestId + " (buffer " + position + " into slot " + slot + ", " + lengthBytes
                        + " bytes) brought other bytes than the served buffer; first difference at byte "
                        + received[slot].mismatch(expected[position]));
                return;
            }
            if (expected != null) {
                checked.incrementAndGet();
            }
            if (done.incrementAndGet() == total) {
                finished.countDown();
            }
        }

        private void fail(String why) {
            if (failure == null) {
                failure = why;
            }
            finished.countDown();
        }
    }
}
