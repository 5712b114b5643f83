package org.rdmashuffle.mapreduce.bench;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * CPU time of NodeManager processes over one job, read from Linux's {@code /proc}: the whole process
 * ({@code /proc/<pid>/stat}, user + system, its threads that ended included; not its children, the containers),
 * and the threads that serve map outputs ({@code /proc/<pid>/task/<tid>/stat}, by thread name, of which the
 * kernel keeps the first 15 characters):
 * <ul>
 *   <li>Hadoop's HTTP shuffle: {@code ShuffleHandler Netty Boss #n} and {@code ShuffleHandler Netty Worker #n}
 *       ({@code "ShuffleHandler "} to the kernel): they read index files and send map outputs, with
 *       {@code sendfile}.</li>
 *   <li>rdma-shuffle's serving threads: the transport's responder ({@code rdma-tcp-responder-<port>}, which
 *       answers READs), the REGISTER workers ({@code rdma-shuffle-register-<port>-n}) and the output file openers
 *       ({@code rdma-shuffle-open-<port>-n}).</li>
 *   <li>rdma-shuffle's other threads, counted apart: the node's requester ({@code rdma-tcp-requester-<port>},
 *       which a NodeManager never uses to READ but which wakes every 50 ms), maintenance and job stops.</li>
 * </ul>
 * Threads that start and end between two samples would be missed, so a window samples every
 * {@value #SAMPLE_MS} ms and keeps each thread's last value; the openers, the shortest-lived of these threads,
 * stay 30 seconds after their last work.
 *
 * <p>One window per job: {@link #open()} takes the baseline, {@link Window#close()} the end. Not thread safe.
 */
final class NodeManagerCpu {
    static final long SAMPLE_MS = 500;

    /**
     * CPU milliseconds of one NodeManager (or several, summed) in one window: the whole process, Hadoop's
     * ShuffleHandler threads, rdma-shuffle's threads, and the serving threads by name (the kernel's 15 characters;
     * "name (system)": of that, the time in the kernel).
     */
    record Use(long processMs, long hadoopShuffleThreadsMs, long rdmaServingThreadsMs, long rdmaOtherThreadsMs,
               Map<String, Long> byName) {
        static final Use NONE = new Use(0, 0, 0, 0, Map.of());

        Use plus(Use o) {
            Map<String, Long> names = new TreeMap<>(byName);
            o.byName.forEach((k, v) -> names.merge(k, v, Long::sum));
            return new Use(processMs + o.processMs, hadoopShuffleThreadsMs + o.hadoopShuffleThreadsMs,
                    rdmaServingThreadsMs + o.rdmaServingThreadsMs, rdmaOtherThreadsMs + o.rdmaOtherThreadsMs, names);
        }
    }

    private enum Kind { HADOOP_SHUFFLE, RDMA_SERVING, RDMA_OTHER, OTHER }

    private final Map<String, Long> pids;
    private final Map<Long, String> names = new HashMap<>(); // tid -> thread name, of the serving threads
    private final long msPerTick;

    /** {@code pids}: each NodeManager's name (say "A") and process id; {@code clockTicksPerSecond}: CLK_TCK. */
    NodeManagerCpu(Map<String, Long> pids, long clockTicksPerSecond) {
        this.pids = new LinkedHashMap<>(pids);
        this.msPerTick = 1000 / clockTicksPerSecond;
        for (Map.Entry<String, Long> e : this.pids.entrySet()) {
            if (!Files.isReadable(Path.of("/proc", Long.toString(e.getValue()), "stat"))) {
                throw new IllegalArgumentException("no process " + e.getValue() + " (NodeManager " + e.getKey()
                        + ") in /proc");
            }
        }
    }

    /** Starts a window: the baseline now, then a sample every {@value #SAMPLE_MS} ms until it closes. */
    Window open() throws IOException {
        return new Window();
    }

    /** One job's window. {@link #close()} returns the use per NodeManager (its name as given). */
    final class Window {
        private final Map<String, Long> processStart = new HashMap<>();
        /** Per NodeManager, tid to {ticks at start, last ticks, kind, system ticks at start, last system ticks}. */
        private final Map<String, Map<Long, long[]>> threads = new HashMap<>();
        private final ScheduledExecutorService sampler;

        private Window() throws IOException {
            for (Map.Entry<String, Long> nm : pids.entrySet()) {
                processStart.put(nm.getKey(), ticks(Path.of("/proc", nm.getValue().toString(), "stat")));
                Map<Long, long[]> byTid = new HashMap<>();
                threads.put(nm.getKey(), byTid);
                sample(nm.getValue(), byTid, true);
            }
            sampler = Executors.newSingleThreadScheduledExecutor(r -> {
                Thread t = new Thread(r, "nodemanager-cpu-sampler");
                t.setDaemon(true);
                return t;
            });
            sampler.scheduleWithFixedDelay(this::sampleAll, SAMPLE_MS, SAMPLE_MS, TimeUnit.MILLISECONDS);
        }

        private synchronized void sampleAll() {
            for (Map.Entry<String, Long> nm : pids.entrySet()) {
                try {
                    sample(nm.getValue(), threads.get(nm.getKey()), false);
                } catch (IOException e) {
                    // the next sample or close() tries again; close() reports a process that is gone
                }
            }
        }

        /** The end of the window: CPU per NodeManager since {@link #open()}. */
        synchronized Map<String, Use> close() throws IOException, InterruptedException {
            sampler.shutdownNow();
            sampler.awaitTermination(5, TimeUnit.SECONDS);
            Map<String, Use> uses = new LinkedHashMap<>();
            for (Map.Entry<String, Long> nm : pids.entrySet()) {
                Map<Long, long[]> byTid = threads.get(nm.getKey());
                sample(nm.getValue(), byTid, false);
                long process = ticks(Path.of("/proc", nm.getValue().toString(), "stat"))
                        - processStart.get(nm.getKey());
                long hadoop = 0;
                long rdma = 0;
                long rdmaOther = 0;
                Map<String, Long> byName = new TreeMap<>();
                for (Map.Entry<Long, long[]> e : byTid.entrySet()) {
                    long[] t = e.getValue();
                    long used = t[1] - t[0];
                    if (t[2] == Kind.HADOOP_SHUFFLE.ordinal()) {
                        hadoop += used;
                    } else if (t[2] == Kind.RDMA_SERVING.ordinal()) {
                        rdma += used;
                    } else if (t[2] == Kind.RDMA_OTHER.ordinal()) {
                        rdmaOther += used;
                    }
                    if (t[2] != Kind.OTHER.ordinal()) {
                        byName.merge(names.get(e.getKey()), used * msPerTick, Long::sum);
                        byName.merge(names.get(e.getKey()) + " (system)", (t[4] - t[3]) * msPerTick, Long::sum);
                    }
                }
                uses.put(nm.getKey(), new Use(process * msPerTick, hadoop * msPerTick, rdma * msPerTick,
                        rdmaOther * msPerTick, byName));
            }
            return uses;
        }

        /** Every thread's ticks now; a thread first seen after the baseline started at 0. */
        private void sample(long pid, Map<Long, long[]> byTid, boolean baseline) throws IOException {
            Path tasks = Path.of("/proc", Long.toString(pid), "task");
            try (DirectoryStream<Path> dir = Files.newDirectoryStream(tasks)) {
                for (Path task : dir) {
                    String stat;
                    try {
                        stat = Files.readString(task.resolve("stat"));
                    } catch (NoSuchFileException gone) {
                        continue; // the thread ended since the listing: its last sample stands
                    }
                    long tid = Long.parseLong(task.getFileName().toString());
                    String name = stat.substring(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
                    long now = ticksOf(stat);
                    long system = systemTicksOf(stat);
                    long[] t = byTid.get(tid);
                    if (t == null) {
                        Kind kind = kindOf(name);
                        byTid.put(tid, new long[] {baseline ? now : 0, now, kind.ordinal(), baseline ? system : 0,
                            system});
                        if (kind != Kind.OTHER) {
                            names.put(tid, name.replaceAll("[-# ]*[0-9]*$", ""));
                        }
                    } else {
                        t[1] = now;
                        t[4] = system;
                    }
                }
            }
        }
    }

    private static Kind kindOf(String threadName) {
        if (threadName.startsWith("ShuffleHandler")) {
            return Kind.HADOOP_SHUFFLE;
        }
        if (threadName.startsWith("rdma-tcp-respon") || threadName.startsWith("rdma-shuffle-re")
                || threadName.startsWith("rdma-shuffle-op")) {
            return Kind.RDMA_SERVING;
        }
        return threadName.startsWith("rdma-") ? Kind.RDMA_OTHER : Kind.OTHER;
    }

    /** stime alone: the kernel's share, for the serving threads (sendfile, socket writes). */
    private static long systemTicksOf(String stat) {
        return Long.parseLong(stat.substring(stat.lastIndexOf(')') + 2).trim().split(" ")[12]);
    }

    private static long ticks(Path stat) throws IOException {
        return ticksOf(Files.readString(stat));
    }

    /** utime + stime (fields 14 and 15 of a stat line; the name, field 2, may hold spaces, so count from its end). */
    private static long ticksOf(String stat) {
        String[] f = stat.substring(stat.lastIndexOf(')') + 2).trim().split(" ");
        return Long.parseLong(f[11]) + Long.parseLong(f[12]);
    }
}
