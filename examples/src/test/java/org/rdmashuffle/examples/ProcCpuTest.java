package org.rdmashuffle.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

class ProcCpuTest {
    @Test
    void shouldAddUtimeAndStimeCountingFieldsAfterTheLastParenthesis() {
        String line = "4242 (a) b (c) d) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 8 9 20 0 40 0 99 0";
        assertEquals(1234 + 567, ProcCpu.cpuTicks(line));
        assertEquals("a) b (c) d", ProcCpu.commandName(line));
    }

    @Test
    void shouldRefuseWhatIsNotAStatLine() {
        assertThrows(IllegalArgumentException.class, () -> ProcCpu.cpuTicks("no parenthesis here"));
        assertThrows(IllegalArgumentException.class, () -> ProcCpu.cpuTicks("1 (x) S 1 2"));
    }

    @Test
    void shouldRecogniseOnlyExecutorsOfTheApplication() {
        String[] exec = {"java", "-cp", "x", "org.apache.spark.executor.CoarseGrainedExecutorBackend", "--driver-url",
            "spark://x", "--executor-id", "3", "--hostname", "10.0.0.1", "--cores", "1", "--app-id", "app-1"};
        assertEquals("3", ProcCpu.executorIdOf(exec, "app-1"));
        assertNull(ProcCpu.executorIdOf(exec, "app-2"));
        String[] other = {"java", "org.apache.spark.deploy.worker.Worker", "--executor-id", "3", "--app-id", "app-1"};
        assertNull(ProcCpu.executorIdOf(other, "app-1"));
    }

    @Test
    void shouldSampleThisProcessAndSubtractSamples() throws Exception {
        Assumptions.assumeTrue(Files.isDirectory(Path.of("/proc/self/task")), "needs procfs");
        long pid = ProcessHandle.current().pid();
        ProcCpu.Sample a = ProcCpu.sample(pid);
        long x = 0;
        long end = System.nanoTime() + 300_000_000L;
        while (System.nanoTime() < end) {
            x += Long.numberOfTrailingZeros(x + System.nanoTime());
        }
        ProcCpu.Sample b = ProcCpu.sample(pid);
        ProcCpu.Sample d = b.minus(a);
        assertTrue(d.ticks() > 0 || x < 0, "300 ms of spinning shows as CPU time");
        // The kernel scales each thread's utime and stime, and the process's, on its own, so each live
        // thread may round up by a tick in both; the sum is bounded by the process's time plus that.
        long threads;
        try (var tasks = Files.list(Path.of("/proc/self/task"))) {
            threads = tasks.count();
        }
        long threadSum = d.threadTicks().values().stream().mapToLong(Long::longValue).sum();
        assertTrue(threadSum <= d.ticks() + 2 * threads + 2,
                "threads' ticks " + threadSum + " vs process " + d.ticks() + " with " + threads + " threads");
        assertTrue(threadSum > 0, "the spinning thread's ticks show in its group");
        assertTrue(b.threadTicks().keySet().stream().anyMatch(n -> n.equals("main") || n.startsWith("surefire")
                || n.startsWith("java")), "thread names: " + b.threadTicks().keySet());
    }

    @Test
    void shouldCountGroupsThatAppearedBetweenSamplesFromZero() {
        TreeMap<String, Long> g0 = new TreeMap<>(Map.of("a", 5L));
        TreeMap<String, Long> g1 = new TreeMap<>(Map.of("a", 7L, "b", 3L));
        ProcCpu.Sample d = new ProcCpu.Sample(20, g1).minus(new ProcCpu.Sample(10, g0));
        assertEquals(10, d.ticks());
        assertEquals(Map.of("a", 2L, "b", 3L), d.threadTicks());
    }
}
