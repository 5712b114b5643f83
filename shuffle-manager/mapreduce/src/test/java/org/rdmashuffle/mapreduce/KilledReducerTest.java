package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import org.apache.hadoop.mapreduce.JobID;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.pool.BufferPoolStats;
import org.rdmashuffle.shuffle.core.diagnostics.ProcessResources;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Block;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Request;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeStats;
import org.rdmashuffle.transport.tcp.TcpNode;

/**
 * Reducers that go away while their READs of a large map output are in flight (a task killed, a container's JVM
 * killed): the reducer's pool gets every buffer back, the service's connections and the views its pending replies
 * borrowed go with the reducer, nothing floods the log, and the next reducer is served the right bytes.
 */
@Timeout(120)
class KilledReducerTest {
    /** Larger than the pool's largest buffer (8 MiB): READ through streamed windows, many READs. */
    private static final int BIG = 32 << 20;
    private static final int[] SIZES = {BIG, 5000};

    @TempDir
    Path dir;
    private RunningService fx;
    private final byte[] secret = "secret-of-the-killed".getBytes();
    private JobID job;
    private byte[][] parts;
    private long mappedBytesBefore;

    @BeforeEach
    void start() throws Exception {
        mappedBytesBefore = ProcessResources.sample().mappedBytes();
        fx = new RunningService(dir);
        job = fx.runJob(1, secret);
        parts = fx.writeMapOutput(job, 0, 0, 11, SIZES);
    }

    @AfterEach
    void stop() {
        fx.close();
    }

    private TcpNode serviceNode() {
        return (TcpNode) fx.server().outputs().node();
    }

    private NodeStats serviceStats() {
        return serviceNode().stats();
    }

    private static void await(BooleanSupplier done, Supplier<String> what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!done.getAsBoolean() && System.nanoTime() < deadline) {
            Thread.sleep(20);
        }
        assertTrue(done.getAsBoolean(), what);
    }

    private RegisterProtocol.Reply register(ReducerClient client, int reduce) throws Exception {
        RegisterProtocol.Reply reply = RunningService.register(client, fx.address(), 1, SIZES.length, reduce,
                new MapAttempt(0, 0));
        assertEquals(RegisterProtocol.OK, reply.status(), reply.reason());
        assertEquals(RegisterProtocol.PUBLISHED, reply.maps()[0].state());
        return reply;
    }

    private static byte[] readAll(Block b) throws Exception {
        byte[] bytes = new byte[Math.toIntExact(b.length())];
        try (InputStream in = b.open(0, b.length())) {
            int at = 0;
            for (int n; at < bytes.length && (n = in.read(bytes, at, bytes.length - at)) > 0; ) {
                at += n;
            }
            assertEquals(bytes.length, at);
        }
        return bytes;
    }

    /** A new reducer of the job gets both partitions' bytes. */
    private void assertTheNextReducerIsServed() throws Exception {
        try (ReducerClient client = fx.reducer(job, secret)) {
            NodeAddress at = fx.address();
            for (int reduce = 0; reduce < SIZES.length; reduce++) {
                RegisterProtocol.Reply reply = register(client, reduce);
                try (BlockFetcher f = client.newFetcher(1)) {
                    f.add(new Request(at, reply.table(), 0, 0, reduce, reduce + 1));
                    try (Block b = f.next()) {
                        assertFalse(b.unregistered(), () -> "left to HTTP: " + b.viaEngineReason());
                        assertArrayEquals(parts[reduce], readAll(b), "partition " + reduce);
                    }
                }
            }
        }
    }

    /** The job stops: its outputs are unmapped, so no pending reply of a dead connection still holds a view. */
    private void assertTheJobsMappingsGoWhenItStops() throws Exception {
        fx.stopJob(job);
        await(() -> ProcessResources.sample().mappedBytes() <= mappedBytesBefore,
                () -> "mapped bytes after the job stopped: " + ProcessResources.sample().mappedBytes() + ", before "
                        + mappedBytesBefore + " (a view of a map output still borrowed)");
        assertEquals(0, serviceStats().registeredBytes());
    }

    @Test
    void shouldReturnEveryBufferAndKeepServingWhenAReducersClientClosesWithReadsInFlight() throws Exception {
        ReducerClient client = fx.reducer(job, secret);
        RegisterProtocol.Reply reply = register(client, 0);
        long servedBefore = serviceStats().readsServed();
        AtomicReference<Throwable> readerEnded = new AtomicReference<>();
        long[] readBytes = new long[1];
        Thread reader = new Thread(() -> { // the task thread: its fetcher, READing the big partition
            try (BlockFetcher f = client.newFetcher(1)) {
                f.add(new Request(fx.address(), reply.table(), 0, 0, 0, 1));
                try (Block b = f.next(); InputStream in = b.open(0, b.length())) {
                    byte[] chunk = new byte[1 << 16];
                    for (int n; (n = in.read(chunk)) > 0; ) {
                        readBytes[0] += n;
                    }
                }
            } catch (Throwable t) {
                readerEnded.set(t);
            }
        }, "killed-reducer-task");
        reader.start();
        await(() -> serviceStats().readsServed() > servedBefore + 4, () -> "the reducer's READs are being served");
        client.close(); // the task is killed: its node goes (its READs fail or complete), then its pool
        reader.join(TimeUnit.SECONDS.toMillis(30));
        assertFalse(reader.isAlive(), "the task thread ended once its client closed");
        assertTrue(readerEnded.get() != null || readBytes[0] == BIG, "the READ ended with an error, or whole");
        BufferPoolStats pool = client.poolStats();
        assertEquals(0, pool.inUseBuffers(), "buffers not returned to the reducer's pool: " + pool);
        assertEquals(0, pool.inUseBytes(), pool.toString());
        assertEquals(0, pool.leaksDetected(), pool.toString());
        await(() -> serviceNode().servedConnections() == 0,
                () -> "the service still holds " + serviceNode().servedConnections() + " connections");
        assertTheNextReducerIsServed();
        assertTheJobsMappingsGoWhenItStops();
    }

    @Test
    void shouldDropTheConnectionQuietlyAndKeepServingWhenAReducersJvmIsKilledMidRead() throws Exception {
        List<String> command = new ArrayList<>();
        command.add(ProcessHandle.current().info().command()
                .orElse(Path.of(System.getProperty("java.home"), "bin", "java").toString()));
        for (String arg : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (arg.startsWith("--add-opens") || arg.startsWith("-XX:+IgnoreUnrecognizedVMOptions")) {
                command.add(arg); // the test JVM's module opens (nothing else: no debugger, no agent)
            }
        }
        command.addAll(List.of("-Xmx256m", "-cp", System.getProperty("java.class.path"), ReducerMain.class.getName(),
                Integer.toString(fx.port), job.toString(), Base64.getEncoder().encodeToString(secret), "1",
                Integer.toString(SIZES.length), "0"));
        Path childErr = dir.resolve("reducer.err");
        Process child = new ProcessBuilder(command).redirectError(childErr.toFile()).start();
        try {
            BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(),
                    StandardCharsets.UTF_8));
            String first = out.readLine();
            while (first != null && !first.startsWith("read ") && !first.startsWith("refused ")) {
                first = out.readLine(); // its log lines
            }
            assertNotNull(first, () -> "the reducer ended: " + childLog(childErr));
            assertEquals("read 0 " + BIG, first, () -> childLog(childErr));
            long served = serviceStats().readsServed();
            await(() -> serviceStats().readsServed() > served + 4, () -> "the reducer READs again");
            assertEquals(1, serviceNode().servedConnections());
            try (LoggedWarnings logged = LoggedWarnings.of("org.rdmashuffle")) {
                child.destroyForcibly(); // mid-READ: its next round is being served
                assertTrue(child.waitFor(30, TimeUnit.SECONDS), "the reducer's JVM ended");
                await(() -> serviceNode().servedConnections() == 0,
                        () -> "the service still holds " + serviceNode().servedConnections() + " connections");
                assertTheNextReducerIsServed();
                List<String> warnings = logged.lines();
                assertTrue(warnings.size() <= 1, "a killed reducer logs at most one line: " + warnings);
                assertTheJobsMappingsGoWhenItStops();
            }
        } finally {
            child.destroyForcibly();
        }
    }

    private static String childLog(Path err) {
        try {
            return Files.readString(err);
        } catch (java.io.IOException e) {
            return "(no log: " + e + ")";
        }
    }
}
