package org.rdmashuffle.transport;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A JVM stopped with SIGSTOP finds its own pause when it runs again, and measures it: a JVM of its own (the test's
 * class path, {@link Probe}) is stopped for 2 s; asked afterwards, it counts about those 2 s as paused since it
 * started waiting — not nothing (the pause unseen), and not more than it lasted.
 */
class PausesStoppedProcessTest {

    @Test
    @Timeout(60)
    void shouldMeasureItsOwnPauseWhenAJvmIsStoppedAndContinued() throws Exception {
        assumeTrue(new File("/bin/kill").canExecute() || new File("/usr/bin/kill").canExecute(),
                "needs kill(1) to stop a JVM");
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Process probe = new ProcessBuilder(java, "-Xmx64m", "-cp", System.getProperty("java.class.path"),
                Probe.class.getName()).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        try (BufferedReader out = new BufferedReader(new InputStreamReader(probe.getInputStream(),
                StandardCharsets.UTF_8)); OutputStream in = probe.getOutputStream()) {
            assertEquals("waiting", out.readLine());
            Thread.sleep(300);
            kill("STOP", probe.pid());
            Thread.sleep(2_000);
            kill("CONT", probe.pid());
            Thread.sleep(700); // running, not paused: its watcher looks meanwhile
            in.write('\n');
            in.flush();
            long pausedMs = Long.parseLong(out.readLine());
            // 2 s, less up to the watcher's period; the 1 s it ran around the stop is not a pause
            assertTrue(pausedMs >= 1_500 && pausedMs <= 2_400, "a 2 s stop measured as " + pausedMs + " ms paused");
        } finally {
            probe.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        }
    }

    private static void kill(String signal, long pid) throws Exception {
        Process p = new ProcessBuilder("kill", "-" + signal, Long.toString(pid)).inheritIO().start();
        assertTrue(p.waitFor(10, TimeUnit.SECONDS) && p.exitValue() == 0, "kill -" + signal + " " + pid + " failed");
    }

    /** Starts waiting, says so, and on a line from its input prints how long it was paused since (ms). */
    public static final class Probe {
        public static void main(String[] args) throws Exception {
            long since = System.nanoTime();
            Pauses.pausedSince(since); // the watcher starts
            System.out.println("waiting");
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
            System.out.println(TimeUnit.NANOSECONDS.toMillis(Pauses.pausedSince(since)));
            System.out.flush();
        }
    }
}
