package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;

/**
 * A reader stopped with SIGSTOP (a JVM of its own: the test's class path, {@link Reader}) while its READ to a
 * silent peer is outstanding: when it runs again it finds its own pause, measures it — about the stop, not the
 * time it ran around it — and its READ times out only after a full {@code requestTimeout} of running time, not at
 * the moment it runs again. Eight other threads wait as reduce tasks do, so that the first look after the stop is
 * raced for.
 */
class TcpStoppedReaderTest {
    private static final long TIMEOUT_MS = 4_000;

    @Test
    @Timeout(60)
    void shouldTimeOutAStoppedReadersReadAfterItsRunningTimeAndMeasureThePauseWhenItRunsAgain() throws Exception {
        assumeTrue(new File("/bin/kill").canExecute() || new File("/usr/bin/kill").canExecute(),
                "needs kill(1) to stop a JVM");
        try (SilentPeer silent = new SilentPeer()) {
            String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
            Process reader = new ProcessBuilder(java, "-Xmx128m", "-cp", System.getProperty("java.class.path"),
                    Reader.class.getName(), Integer.toString(silent.port()))
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            try (BufferedReader out = new BufferedReader(new InputStreamReader(reader.getInputStream(),
                    StandardCharsets.UTF_8))) {
                assertEquals("posted", out.readLine());
                Thread.sleep(1_500); // it runs 1.5 s: more than the slack below, less than its timeout
                long stopStart = System.nanoTime();
                kill("STOP", reader.pid());
                long stopEnd = System.nanoTime();
                Thread.sleep(3_000);
                long contStart = System.nanoTime();
                kill("CONT", reader.pid());
                long contEnd = System.nanoTime();
                String[] got = out.readLine().split(" "); // status, ms from post to completion, ms paused since post
                assertEquals(Integer.toString(ReadStatus.TIMEOUT), got[0], "the READ's status");
                long completedMs = Long.parseLong(got[1]);
                long pausedMs = Long.parseLong(got[2]);
                long surelyStopped = TimeUnit.NANOSECONDS.toMillis(contStart - stopEnd);
                long atMostStopped = TimeUnit.NANOSECONDS.toMillis(contEnd - stopStart);
                // found less up to the watcher's period (200 ms) and a look's grain; not the 1.5 s it ran before
                // (700 ms of slack for a loaded host's kill and wake-up)
                assertTrue(pausedMs >= surelyStopped - 300 && pausedMs <= atMostStopped + 700, "stopped "
                        + surelyStopped + "–" + atMostStopped + " ms, measured " + pausedMs + " ms paused");
                assertTrue(completedMs >= TIMEOUT_MS + pausedMs, "the READ timed out " + completedMs + " ms after "
                        + "its post, before " + TIMEOUT_MS + " ms of running time (" + pausedMs + " ms paused)");
            } finally {
                reader.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
        }
    }

    private static void kill(String signal, long pid) throws Exception {
        Process p = new ProcessBuilder("kill", "-" + signal, Long.toString(pid)).inheritIO().start();
        assertTrue(p.waitFor(10, TimeUnit.SECONDS) && p.exitValue() == 0, "kill -" + signal + " " + pid + " failed");
    }

    /**
     * Posts a READ to the silent peer at the port given, says so, and prints its status, how many ms after its
     * post it completed, and how long this JVM was paused since its post.
     */
    public static final class Reader {
        public static void main(String[] args) throws Exception {
            RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                    "spark.shuffle.rdma.requestTimeout", TIMEOUT_MS + "ms"));
            try (TcpNode node = new TcpNode(conf, NodeOptions.loopback())) {
                MemoryRegion sink = node.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK);
                RdmaChannel ch = node.connect(new NodeAddress("127.0.0.1", Integer.parseInt(args[0]), "tcp"));
                for (int i = 0; i < 8; i++) { // as reduce tasks wait: each looks when it wakes
                    Thread t = new Thread(() -> {
                        for (;;) {
                            java.util.concurrent.locks.LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
                            Pauses.pausedSince(System.nanoTime());
                        }
                    });
                    t.setDaemon(true);
                    t.start();
                }
                SilentPeer.PendingRead read = new SilentPeer.PendingRead(ch, sink);
                System.out.println("posted");
                System.out.flush();
                if (!read.await(60_000)) {
                    System.out.println("hung");
                    return;
                }
                System.out.println(read.status() + " " + read.completedAfterMs() + " "
                        + TimeUnit.NANOSECONDS.toMillis(Pauses.pausedSince(read.postedNanos)));
                System.out.flush();
            }
        }
    }
}
