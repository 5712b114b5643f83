package org.rdmashuffle.transport.doctor;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.TransportChoice;
import org.rdmashuffle.transport.TransportException;

/**
 * The reading side of the READ self-test: opens a node of the configured provider, connects to the server, asks
 * it for its region, registers a sink, READs {@code reads} times {@code sizeBytes} across the region (a few at a
 * time), and compares every byte with what the server filled it with. Two checks come out: the connection, and
 * the READs with their MB/s and p50/p99 latency.
 */
final class SelfTestPeer {
    static final String CONNECT = "self-test connect";
    static final String READ = "self-test READ";
    private static final int WINDOW = 8;

    private SelfTestPeer() {
    }

    /** One READ's completion, as the provider's thread hands it over. */
    private record Done(long id, int status, int length, long atNanos) {
    }

    /** The outcome: the two checks, and the measurements when the READs passed. */
    record Outcome(List<Check> checks, SelfTestResult result) {
    }

    static Outcome run(RdmaShuffleConf conf, String host, String peerHost, int peerPort, int reads, int sizeBytes) {
        List<Check> checks = new ArrayList<>();
        RdmaShuffleConf anyPort = conf.with(Map.of(RdmaShuffleConf.PORT.name(), "0"));
        RdmaTransport.Opened opened;
        try {
            opened = RdmaTransport.openChosen(anyPort, new NodeOptions(host, host, ControlHandler.NONE, null));
        } catch (IOException | RuntimeException e) {
            checks.add(Check.of(CONNECT, Check.Status.FAIL, "no local node on " + host + ": " + e.getMessage(),
                    "fix the transport check above"));
            return new Outcome(checks, null);
        }
        TransportChoice choice = opened.choice();
        NodeAddress peer = new NodeAddress(peerHost, peerPort, opened.node().localAddress().provider());
        long timeoutMs = conf.requestTimeoutMs() + conf.connectTimeoutMs();
        try (var node = opened.node()) {
            RdmaChannel ch;
            SelfTestPattern.Served served;
            try {
                ch = node.connect(peer);
                ByteBuffer reply = ch.call(ByteBuffer.wrap(SelfTestPattern.REQUEST))
                        .get(timeoutMs, TimeUnit.MILLISECONDS);
                served = SelfTestPattern.parseReply(reply).orElseThrow(() -> new IOException(
                        "the peer's reply is not a doctor region (is a doctor --serve listening there?)"));
            } catch (IOException | ExecutionException | TimeoutException | InterruptedException e) {
                if (e instanceof InterruptedException) {
                    Thread.currentThread().interrupt();
                }
                Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
                checks.add(Check.of(CONNECT, Check.Status.FAIL, "from " + choice.describe() + " to " + peer + ": "
                        + cause.getMessage(), "start doctor --serve there; check the address, port, firewall and "
                        + "that both ends use the same provider"));
                return new Outcome(checks, null);
            }
            checks.add(Check.pass(CONNECT, "from " + choice.describe() + " to " + peer + ": region of "
                    + served.region().length() + " bytes"));
            if (served.region().length() < sizeBytes) {
                checks.add(Check.of(READ, Check.Status.FAIL, "--size " + sizeBytes + " is larger than the served "
                        + "region (" + served.region().length() + " bytes)", "use a smaller --size"));
                return new Outcome(checks, null);
            }
            Check read;
            SelfTestResult result = null;
            try {
                result = readAll(node, ch, peer, choice, served, reads, sizeBytes, timeoutMs);
                read = Check.pass(READ, String.format("%d x %d bytes, %d bytes verified, %.1f MB/s, %d in flight: "
                                + "p50 %.3f ms, p99 %.3f ms", result.reads(), sizeBytes, result.bytesVerified(),
                        result.mbPerSecond(), Math.min(WINDOW, reads), result.p50Ms(), result.p99Ms()));
            } catch (IOException e) {
                read = Check.of(READ, Check.Status.FAIL, e.getMessage(), "see the connect check; a byte that differs "
                        + "means memory or the fabric corrupts data: report it with this output");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                read = Check.of(READ, Check.Status.FAIL, "interrupted", "run it again");
            }
            checks.add(read);
            return new Outcome(checks, result);
        }
    }

    private static SelfTestResult readAll(RdmaNode node, RdmaChannel ch, NodeAddress peer,
                                          TransportChoice choice, SelfTestPattern.Served served, int reads,
                                          int sizeBytes, long timeoutMs) throws IOException, InterruptedException {
        ByteBuffer sinkMemory = ByteBuffer.allocateDirect(Math.min(WINDOW, reads) * sizeBytes);
        try (MemoryRegion sink = node.register(sinkMemory, RegionAccess.READ_SINK)) {
            try {
                return readWindowed(ch, peer, choice, served, sink, sinkMemory, reads, sizeBytes, timeoutMs);
            } catch (IOException | InterruptedException e) {
                ch.close();   // fails what is still in flight before the sink it lands in goes
                throw e;
            }
        }
    }

    /**
     * READs with {@link #WINDOW} in flight, each verified as it completes. Completions come in any order (a channel
     * promises none), so each READ is verified in the sink slot it was posted into, and the next one goes into the
     * slot the completed one frees.
     */
    static SelfTestResult readWindowed(RdmaChannel ch, NodeAddress peer, TransportChoice choice,
                                               SelfTestPattern.Served served, MemoryRegion sink, ByteBuffer sinkMemory,
                                               int reads, int sizeBytes, long timeoutMs)
            throws IOException, InterruptedException {
        int window = Math.min(WINDOW, reads);
        long spans = served.region().length() / sizeBytes;
        long[] postedAt = new long[reads];
        long[] latency = new long[reads];
        int[] slotOf = new int[reads];
        BlockingQueue<Done> done = new ArrayBlockingQueue<>(reads);
        ReadBatch batch = new ReadBatch(1);
        long start = System.nanoTime();
        int posted = 0;
        for (; posted < window; posted++) {
            slotOf[posted] = posted;
            post(ch, batch, served, sink, posted, posted, spans, sizeBytes, postedAt, done);
        }
        long verified = 0;
        for (int completed = 0; completed < reads; completed++) {
            Done d = done.poll(timeoutMs, TimeUnit.MILLISECONDS);
            if (d == null) {
                throw new IOException("no READ completed within " + timeoutMs + " ms (" + completed + " of "
                        + reads + " done)");
            }
            int i = (int) d.id();
            if (d.status() != ReadStatus.SUCCESS || d.length() != sizeBytes) {
                throw new IOException("READ " + i + " failed: " + ReadStatus.describe(d.status()) + " ("
                        + d.length() + " of " + sizeBytes + " bytes)");
            }
            latency[i] = d.atNanos() - postedAt[i];
            long remote = (i % spans) * sizeBytes;
            int slot = slotOf[i];
            long diff = SelfTestPattern.firstDifference(sinkMemory, slot * sizeBytes, remote, sizeBytes,
                    served.seed());
            if (diff >= 0) {
                throw new IOException("READ " + i + ": byte " + (remote + diff) + " of the region differs from "
                        + "what the server wrote");
            }
            verified += sizeBytes;
            if (posted < reads) {
                slotOf[posted] = slot;
                post(ch, batch, served, sink, posted, slot, spans, sizeBytes, postedAt, done);
                posted++;
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        Arrays.sort(latency);
        return new SelfTestResult(peer.toString(), choice.describe(), reads, sizeBytes, verified,
                verified / 1e6 / seconds, percentile(latency, 50) / 1e6, percentile(latency, 99) / 1e6);
    }

    private static void post(RdmaChannel ch, ReadBatch batch, SelfTestPattern.Served served, MemoryRegion sink,
                             int i, int slot, long spans, int sizeBytes, long[] postedAt, BlockingQueue<Done> done)
            throws TransportException {
        long remote = (i % spans) * sizeBytes;
        batch.clear();
        batch.add(served.region().address() + remote, served.region().rkey(), sizeBytes, sink, slot * sizeBytes, i);
        postedAt[i] = System.nanoTime();
        ch.post(batch, (id, status, length) -> done.add(new Done(id, status, length, System.nanoTime())));
    }

    /** The {@code p}th percentile of sorted values (nearest rank). */
    static long percentile(long[] sorted, int p) {
        int rank = (int) Math.ceil(p / 100.0 * sorted.length);
        return sorted[Math.max(0, rank - 1)];
    }
}
