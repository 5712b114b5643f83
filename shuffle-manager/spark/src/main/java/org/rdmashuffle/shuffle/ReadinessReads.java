package org.rdmashuffle.shuffle;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.shuffle.ReadinessReport.Pair;
import org.rdmashuffle.shuffle.ReadinessReport.Placed;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/**
 * The readiness job's READs from one peer and the pattern they check: every region holds, at each 8-byte
 * word, a mix of the word's index and a seed drawn from the run and the executor that registered it, so a
 * byte READ from the wrong place, the wrong region or the wrong executor is found.
 *
 * <p>READs go one at a time (a READ's latency is its own, not a queue's), each of 1 MiB, at offsets that
 * cycle through the peer's region, into one buffer of the reader's pool; the MB/s is the bytes over the time
 * READs were in flight.
 */
final class ReadinessReads {
    static final int READ_BYTES = 1 << 20;
    /** Beyond the channel's own request timeout (which fails a READ outstanding longer) before giving up. */
    private static final long COMPLETION_GRACE_MS = 5_000;

    private ReadinessReads() {
    }

    /** The seed of the region {@code executorId} registers in run {@code runId}. */
    static long seed(String runId, String executorId) {
        long h = 0x243F6A8885A308D3L;
        for (byte b : (runId + "/" + executorId).getBytes(StandardCharsets.UTF_8)) {
            h = mix(h ^ b);
        }
        return h;
    }

    /** SplitMix64's finaliser: every input bit reaches every output bit. */
    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** The word at {@code wordIndex} of a region with {@code seed}. */
    static long word(long seed, long wordIndex) {
        return mix(seed + wordIndex * 0x9E3779B97F4A7C15L);
    }

    /** Fills {@code memory} (a multiple of 8 bytes) with the pattern of {@code seed}. */
    static void fill(ByteBuffer memory, long seed) {
        for (int i = 0; i < memory.capacity(); i += 8) {
            memory.putLong(i, word(seed, i >>> 3));
        }
    }

    /**
     * Where {@code landed}'s {@code length} bytes differ from the pattern of {@code seed} at region offset
     * {@code regionOffset}: a description of the first difference, or null when every byte is right.
     */
    static String firstDifference(ByteBuffer landed, int length, long seed, long regionOffset) {
        for (int i = 0; i < length; i += 8) {
            long want = word(seed, (regionOffset + i) >>> 3);
            long got = landed.getLong(i);
            if (want != got) {
                int b = Long.numberOfLeadingZeros(want ^ got) >>> 3; // first differing byte (big-endian)
                return "byte " + (regionOffset + i + b) + " of the region is 0x"
                        + Integer.toHexString((int) (got >>> (56 - 8 * b)) & 0xFF) + ", the pattern has 0x"
                        + Integer.toHexString((int) (want >>> (56 - 8 * b)) & 0xFF);
            }
        }
        return null;
    }

    /** One READ's completion, reused for the next: the reader waits, the transport's thread signals. */
    private static final class Completion implements ReadListener {
        private final Semaphore done = new Semaphore(0);
        private volatile int status;
        private volatile int lengthBytes;

        @Override
        public void onReadComplete(long requestId, int status, int lengthBytes) {
            this.status = status;
            this.lengthBytes = lengthBytes;
            done.release();
        }
    }

    /**
     * READs {@code reads} MiB from {@code peer}'s region through {@code rt}'s node into a buffer of its pool,
     * verifies every byte against the pattern of {@code seed}, and measures. Never throws: a failure is the
     * pair's cause.
     */
    static Pair measure(ExecutorRuntime rt, String self, Placed peer, long seed, int reads) {
        String to = peer.executorId();
        RegionDescriptor region = peer.region();
        if (region.length() < READ_BYTES) {
            return Pair.failed(self, to, "its region of " + region.length() + " bytes is smaller than one READ");
        }
        long slots = region.length() / READ_BYTES;
        RdmaChannel channel;
        try {
            channel = rt.node.connect(peer.node());
        } catch (Exception e) {
            return Pair.failed(self, to, "cannot connect to " + peer.node() + ": " + cause(e));
        }
        RegisteredBuffer buffer;
        try {
            buffer = rt.pool.acquire(READ_BYTES);
        } catch (Exception e) {
            return Pair.failed(self, to, "no 1 MiB buffer from the pool: " + cause(e));
        }
        boolean landedAll = false; // a READ that may still land keeps the buffer out of the pool
        long timeoutMs = rt.conf.requestTimeoutMs() + COMPLETION_GRACE_MS;
        try {
            ReadBatch batch = new ReadBatch(1);
            Completion c = new Completion();
            long[] nanos = new long[reads];
            for (int k = 0; k < reads; k++) {
                long offset = (k % slots) * READ_BYTES;
                batch.add(region.address() + offset, region.rkey(), READ_BYTES, buffer, 0, k);
                long t0 = System.nanoTime();
                try {
                    channel = post(rt, peer, channel, batch, c);
                } catch (TransportException e) {
                    landedAll = true; // the channel's contract: nothing was posted
                    return Pair.failed(self, to, "READ " + (k + 1) + " of " + reads + " not posted: " + cause(e));
                } finally {
                    batch.clear();
                }
                if (!c.done.tryAcquire(timeoutMs, TimeUnit.MILLISECONDS)) {
                    return Pair.failed(self, to, "READ " + (k + 1) + " of " + reads + " did not complete within "
                            + timeoutMs + " ms");
                }
                nanos[k] = System.nanoTime() - t0;
                if (c.status != ReadStatus.SUCCESS) {
                    landedAll = true;
                    return Pair.failed(self, to, "READ " + (k + 1) + " of " + reads + " at offset " + offset
                            + " failed: " + ReadStatus.describe(c.status));
                }
                if (c.lengthBytes != READ_BYTES) {
                    landedAll = true;
                    return Pair.failed(self, to, "READ " + (k + 1) + " of " + reads + " placed " + c.lengthBytes
                            + " bytes, not " + READ_BYTES);
                }
                String wrong = firstDifference(buffer.byteBuffer(), READ_BYTES, seed, offset);
                if (wrong != null) {
                    landedAll = true;
                    return Pair.failed(self, to, "READ " + (k + 1) + " of " + reads + ": " + wrong);
                }
            }
            landedAll = true;
            return measured(self, to, nanos);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return Pair.failed(self, to, "interrupted while waiting for a READ");
        } catch (Exception e) {
            return Pair.failed(self, to, cause(e));
        } finally {
            if (landedAll) {
                buffer.release();
            }
        }
    }

    /**
     * Posts {@code batch} on {@code channel}; a channel that closed after going unused is replaced once, as
     * the fetcher does. Returns the channel posted on.
     */
    private static RdmaChannel post(ExecutorRuntime rt, Placed peer, RdmaChannel channel, ReadBatch batch,
                                    Completion c) throws TransportException {
        try {
            channel.post(batch, c);
            return channel;
        } catch (TransportException e) {
            if (e.status() != ReadStatus.IDLE_CLOSED) {
                throw e;
            }
            RdmaChannel fresh = rt.node.connect(peer.node());
            fresh.post(batch, c);
            return fresh;
        }
    }

    /** The pair's MB/s (10^6 bytes per second in flight) and latency percentiles (nearest rank). */
    static Pair measured(String from, String to, long[] nanos) {
        long[] sorted = nanos.clone();
        Arrays.sort(sorted);
        long sum = 0;
        for (long n : sorted) {
            sum += n;
        }
        long bytes = (long) READ_BYTES * nanos.length;
        double mbPerSecond = sum == 0 ? 0 : bytes / (sum / 1e9) / 1e6;
        return new Pair(from, to, true, bytes, mbPerSecond, percentile(sorted, 50) / 1e6,
                percentile(sorted, 99) / 1e6, null);
    }

    /** The nearest-rank {@code p}th percentile of {@code sorted} (not empty). */
    static long percentile(long[] sorted, int p) {
        int rank = (int) Math.ceil(p / 100.0 * sorted.length);
        return sorted[Math.max(0, rank - 1)];
    }

    /** An exception's message, or its class where it has none. */
    static String cause(Throwable e) {
        String m = e.getMessage();
        return m == null || m.isBlank() ? e.getClass().getSimpleName() : m.replace('\n', ' ');
    }
}
