package org.rdmashuffle.examples;

import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * Process and thread CPU time from {@code /proc}, for the benchmarks that report an executor's CPU
 * per byte or per block: Spark's task metrics leave out every thread but the task's (the transport's,
 * Netty's, the garbage collector's), the process's {@code utime + stime} does not. Executors are found
 * by their command line ({@code CoarseGrainedExecutorBackend ... --executor-id ID ... --app-id APP}),
 * which works for executors started by a standalone Worker in another network namespace as well as
 * for {@code local-cluster}'s.
 */
final class ProcCpu {
    private ProcCpu() {
    }

    /**
     * A process's CPU time in clock ticks, and its live threads' ticks summed by name (digits replaced by
     * {@code #}, names as the kernel keeps them: at most 15 characters). Threads that ended are in
     * {@code ticks} (the kernel adds them to the process) but in no group.
     */
    record Sample(long ticks, SortedMap<String, Long> threadTicks) implements Serializable {
        private static final long serialVersionUID = 1L;

        /** What was spent between {@code before} and this sample; groups absent before count from zero. */
        Sample minus(Sample before) {
            SortedMap<String, Long> d = new TreeMap<>();
            threadTicks.forEach((k, v) -> d.put(k, v - before.threadTicks.getOrDefault(k, 0L)));
            return new Sample(ticks - before.ticks, d);
        }
    }

    /**
     * utime + stime (fields 14 and 15) of one {@code /proc/.../stat} line, in clock ticks. The command
     * name (field 2) may hold spaces and parentheses, so fields are counted after its last ')'.
     *
     * @throws IllegalArgumentException when the line is not a stat line
     */
    static long cpuTicks(String statLine) {
        int close = statLine.lastIndexOf(')');
        if (close < 0) {
            throw new IllegalArgumentException("not a /proc stat line: " + statLine);
        }
        String[] f = statLine.substring(close + 1).trim().split(" +");
        // f[0] is field 3 (state), so field n is f[n - 3].
        if (f.length < 13) {
            throw new IllegalArgumentException("short /proc stat line: " + statLine);
        }
        return Long.parseLong(f[11]) + Long.parseLong(f[12]);
    }

    /** The command name of a stat line (between the first '(' and the last ')'). */
    static String commandName(String statLine) {
        int open = statLine.indexOf('(');
        int close = statLine.lastIndexOf(')');
        if (open < 0 || close < open) {
            throw new IllegalArgumentException("not a /proc stat line: " + statLine);
        }
        return statLine.substring(open + 1, close);
    }

    /** {@code pid}'s CPU now, with its threads grouped by name. */
    static Sample sample(long pid) throws IOException {
        Path proc = Path.of("/proc", Long.toString(pid));
        long total = cpuTicks(Files.readString(proc.resolve("stat"), StandardCharsets.UTF_8));
        SortedMap<String, Long> groups = new TreeMap<>();
        try (DirectoryStream<Path> tasks = Files.newDirectoryStream(proc.resolve("task"))) {
            for (Path t : tasks) {
                String line;
                try {
                    line = Files.readString(t.resolve("stat"), StandardCharsets.UTF_8);
                } catch (IOException gone) {
                    continue; // the thread ended while we listed
                }
                groups.merge(commandName(line).replaceAll("[0-9]+", "#"), cpuTicks(line), Long::sum);
            }
        }
        return new Sample(total, groups);
    }

    /**
     * The executor processes of application {@code appId} on this machine, by executor id, from
     * their command lines; empty where there is no procfs.
     */
    static Map<String, Long> executorPids(String appId) throws IOException {
        Map<String, Long> pids = new TreeMap<>();
        Path proc = Path.of("/proc");
        if (!Files.isDirectory(proc)) {
            return pids;
        }
        try (DirectoryStream<Path> all = Files.newDirectoryStream(proc, "[0-9]*")) {
            for (Path p : all) {
                byte[] raw;
                try {
                    raw = Files.readAllBytes(p.resolve("cmdline"));
                } catch (IOException gone) {
                    continue;
                }
                String id = executorIdOf(new String(raw, StandardCharsets.UTF_8).split("\0"), appId);
                if (id != null) {
                    pids.put(id, Long.parseLong(p.getFileName().toString()));
                }
            }
        }
        return pids;
    }

    /** The executor id of a command line when it is an executor of {@code appId}, else null. */
    static String executorIdOf(String[] argv, String appId) {
        boolean executor = false;
        String id = null;
        String app = null;
        for (int i = 0; i < argv.length; i++) {
            if (argv[i].endsWith("CoarseGrainedExecutorBackend")) {
                executor = true;
            } else if (i + 1 < argv.length && argv[i].equals("--executor-id")) {
                id = argv[i + 1];
            } else if (i + 1 < argv.length && argv[i].equals("--app-id")) {
                app = argv[i + 1];
            }
        }
        return executor && appId.equals(app) ? id : null;
    }

    /** Clock ticks per second ({@code getconf CLK_TCK}; 100 when that cannot run, as on every Linux build we know). */
    static long ticksPerSecond() {
        try {
            Process p = new ProcessBuilder("getconf", "CLK_TCK").redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.US_ASCII).trim();
            return p.waitFor() == 0 ? Long.parseLong(out) : 100;
        } catch (IOException | NumberFormatException e) {
            return 100;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return 100;
        }
    }
}
