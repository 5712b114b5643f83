package org.rdmashuffle.mapreduce.bench;

import java.io.IOException;
import java.net.URI;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.ToDoubleFunction;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapreduce.MRConfig;
import org.apache.hadoop.mapreduce.MRJobConfig;
import org.apache.hadoop.mapreduce.TaskCompletionEvent;
import org.apache.hadoop.mapreduce.TaskCounter;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.NodeState;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.rdmashuffle.mapreduce.MapReduceRdmaConf;
import org.rdmashuffle.mapreduce.RdmaShuffle;
import org.rdmashuffle.mapreduce.RdmaShuffleCounter;
import org.rdmashuffle.mapreduce.jobs.JobResult;
import org.rdmashuffle.mapreduce.jobs.TeraRows;
import org.rdmashuffle.mapreduce.jobs.TeraSort;

/**
 * The two-host MapReduce comparison ({@code examples/run-mapreduce.sh --two-hosts}): TeraSort under Hadoop's HTTP
 * shuffle and under rdma-shuffle (tcp provider), alternately, on a YARN cluster the script started as separate
 * processes — a ResourceManager, and a NodeManager in each of two network namespaces, each running
 * {@code org.rdmashuffle.mapreduce.RdmaShuffleHandler} as {@code mapreduce_shuffle} (Hadoop's HTTP shuffle and READs
 * from one service). This driver is the job client; the cluster's addresses come from the {@code *-site.xml} files
 * first on its class path.
 *
 * <p>Per job: wall time; the reducers' copy phase (the shuffle plugin's {@code run}, timed by {@link TimedShuffle},
 * less the final merge the job history shows, mean over reducers: as {@link MapReduceComparison}); the NodeManagers'
 * CPU ({@link NodeManagerCpu}: whole processes, and their map-output-serving threads) per GB of
 * {@code REDUCE_SHUFFLE_BYTES}; the counters. Every run's output must equal the first run's.
 *
 * <p>Arguments: {@code --work DIR} (a directory both hosts see: input, outputs), {@code --nm NAME=PID} (each
 * NodeManager, at least one), {@code --rows N} (default 20,000,000: 2 GB), {@code --maps M} (16),
 * {@code --reduces R} (4), {@code --rounds K} (3), {@code --rdma-port P} (the services' fixed port, 13570),
 * {@code --clock-ticks T} (CLK_TCK, 100), {@code --jfr DIR} (a JFR recording of every reducer; off by default),
 * {@code --deadline INSTANT} (e.g. 2026-12-06T22:25:00Z: no round starts that the longest round so far would take
 * past it; the table shows the rounds run).
 */
public final class TwoHostComparison {
    /** One job; in a median row every number is the median of its own column. */
    private record Run(int round, String shuffle, long jobMs, double copyMs, double finalMergeMs, long shuffleBytes,
                       NodeManagerCpu.Use cpu, Map<String, NodeManagerCpu.Use> perNm, long taskCpuMs, long read,
                       long viaHttp, String placement) {
        /**
         * The NodeManagers' CPU in the serving threads of the shuffle the job used: Hadoop's ShuffleHandler threads
         * in a Hadoop run; rdma-shuffle's responder, REGISTER workers and openers, and ShuffleHandler's threads, in
         * an rdma run (the drop-in runs both, and a reducer may fall back to HTTP). rdma-shuffle's other threads
         * are in {@link NodeManagerCpu.Use#rdmaOtherThreadsMs()} and the whole process.
         */
        long servingMs() {
            return shuffle.equals("rdma") ? cpu.rdmaServingThreadsMs() + cpu.hadoopShuffleThreadsMs()
                    : cpu.hadoopShuffleThreadsMs();
        }

        double servingMsPerGb() {
            return servingMs() / gb();
        }

        double processMsPerGb() {
            return cpu.processMs() / gb();
        }

        private double gb() {
            return shuffleBytes / 1e9;
        }
    }

    private TwoHostComparison() {
    }

    public static void main(String[] args) throws Exception {
        long rows = 20_000_000;
        int maps = 16;
        int reduces = 4;
        int rounds = 3;
        int rdmaPort = MapReduceRdmaConf.DEFAULT_PORT;
        long clockTicks = 100;
        String work = null;
        String jfr = null;
        long deadlineMs = Long.MAX_VALUE;
        Map<String, Long> nms = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i += 2) {
            String v = i + 1 < args.length ? args[i + 1] : null;
            switch (args[i]) {
                case "--rows" -> rows = Long.parseLong(v);
                case "--maps" -> maps = Integer.parseInt(v);
                case "--reduces" -> reduces = Integer.parseInt(v);
                case "--rounds" -> rounds = Integer.parseInt(v);
                case "--rdma-port" -> rdmaPort = Integer.parseInt(v);
                case "--clock-ticks" -> clockTicks = Long.parseLong(v);
                case "--work" -> work = v;
                case "--jfr" -> jfr = v;
                case "--deadline" -> deadlineMs = java.time.Instant.parse(v).toEpochMilli();
                case "--nm" -> nms.put(v.substring(0, v.indexOf('=')),
                        Long.parseLong(v.substring(v.indexOf('=') + 1)));
                default -> throw new IllegalArgumentException("unknown argument " + args[i]
                        + " (--work DIR --nm NAME=PID... --rows N --maps M --reduces R --rounds K --rdma-port P"
                        + " --clock-ticks T --jfr DIR --deadline INSTANT)");
            }
        }
        if (work == null || nms.isEmpty()) {
            throw new IllegalArgumentException("--work DIR and --nm NAME=PID are needed");
        }
        NodeManagerCpu cpu = new NodeManagerCpu(nms, clockTicks);
        JobConf base = new JobConf(new YarnConfiguration());
        waitForNodeManagers(base, nms.size());
        FileSystem fs = FileSystem.getLocal(base);
        Path workDir = new Path(new java.io.File(work).getAbsoluteFile().toURI());
        Path input = new Path(workDir, "input-" + rows + "-" + maps);
        if (!fs.exists(new Path(input, "_COMPLETE"))) {
            long t0 = System.nanoTime();
            fs.delete(input, true);
            TeraRows.writeFiles(input, rows, maps, 0x5EEDL);
            fs.create(new Path(input, "_COMPLETE")).close();
            System.out.printf(Locale.ROOT, "input: %,d rows (%d MB) in %d files written in %d ms%n", rows,
                    rows * TeraRows.ROW_BYTES / 1_000_000, maps, (System.nanoTime() - t0) / 1_000_000);
        }
        List<Run> runs = new ArrayList<>();
        Long firstChecksum = null;
        long roundMs = 0;
        for (int round = 1; round <= rounds; round++) {
            if (System.currentTimeMillis() + roundMs > deadlineMs) {
                System.out.printf(Locale.ROOT, "round %d not started: it would end after the deadline %s (a round"
                        + " took %d ms)%n", round, java.time.Instant.ofEpochMilli(deadlineMs), roundMs);
                break;
            }
            long roundStart = System.currentTimeMillis();
            for (boolean rdma : new boolean[] {false, true}) {
                JobConf conf = new JobConf(base);
                // One split per input file, whatever the local file system's block size (32 MB) would cut.
                conf.setLong(FileInputFormat.SPLIT_MAXSIZE, rows / maps * TeraRows.ROW_BYTES);
                conf.setLong(FileInputFormat.SPLIT_MINSIZE, rows / maps * TeraRows.ROW_BYTES);
                conf.set(MRConfig.SHUFFLE_CONSUMER_PLUGIN, TimedShuffle.class.getName());
                if (jfr != null) {
                    java.io.File runDir = new java.io.File(jfr, "round" + round + (rdma ? "-rdma" : "-hadoop"));
                    if (!runDir.mkdirs() && !runDir.isDirectory()) {
                        throw new IOException("cannot create " + runDir);
                    }
                    conf.set(MRJobConfig.REDUCE_JAVA_OPTS, conf.get(MRJobConfig.REDUCE_JAVA_OPTS, "")
                            + " -XX:StartFlightRecording=settings=profile,filename=" + runDir.getAbsolutePath() + "/");
                }
                if (rdma) {
                    conf.set(TimedShuffle.PLUGIN, RdmaShuffle.class.getName());
                    conf.set(MapReduceRdmaConf.PORT, Integer.toString(rdmaPort));
                    conf.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
                }
                Path out = new Path(workDir, "sorted-" + round + (rdma ? "-rdma" : "-http"));
                fs.delete(out, true);
                NodeManagerCpu.Window window = cpu.open();
                JobResult job = TeraSort.run(conf, input, out, reduces);
                Map<String, NodeManagerCpu.Use> perNm = window.close();
                if (!job.succeeded()) {
                    throw new IllegalStateException("TeraSort failed: " + job.jobId());
                }
                long checksum = MapReduceComparison.checksum(out);
                if (firstChecksum == null) {
                    firstChecksum = checksum;
                } else if (firstChecksum != checksum) {
                    throw new IllegalStateException("output of " + job.jobId() + " (" + out
                            + ") differs from the first run's");
                }
                fs.delete(out, true); // 2 GB a run: the checksum is what the next runs are held to
                MapReduceComparison.Phases phases = MapReduceComparison.phases(conf, job);
                double runMs = job.counter(TimedShuffle.Timing.SHUFFLE_RUN_MILLIS) / (double) reduces;
                NodeManagerCpu.Use sum = perNm.values().stream().reduce(NodeManagerCpu.Use.NONE,
                        NodeManagerCpu.Use::plus);
                Run r = new Run(round, rdma ? "rdma" : "hadoop", job.elapsedMs(), runMs - phases.finalMergeMs(),
                        phases.finalMergeMs(), job.counter(TaskCounter.REDUCE_SHUFFLE_BYTES), sum, perNm,
                        job.counter(TaskCounter.CPU_MILLISECONDS), job.counter(RdmaShuffleCounter.MAPS_READ),
                        job.counter(RdmaShuffleCounter.MAPS_VIA_HTTP), placement(job));
                runs.add(r);
                System.out.println(describe(r, sum, rdma ? where(job, reduces) : ""));
            }
            roundMs = Math.max(roundMs, System.currentTimeMillis() - roundStart);
        }
        print(runs, rows, maps, reduces);
    }

    private static String describe(Run r, NodeManagerCpu.Use sum, String where) {
        return String.format(Locale.ROOT, "round %d %-6s job %6d ms  copy %6.0f ms  final merge %6.0f ms  shuffled %,d"
                        + " bytes  task cpu %d ms  READ %d  http %d  %s %s%n  NodeManager CPU: process %d ms, serving"
                        + " threads %d ms (Hadoop's %d, rdma's %d; rdma's others %d) = %.0f ms per GB (process %.0f);"
                        + " by thread %s; per NodeManager %s", r.round(), r.shuffle(), r.jobMs(), r.copyMs(),
                r.finalMergeMs(), r.shuffleBytes(), r.taskCpuMs(), r.read(), r.viaHttp(), r.placement(), where,
                sum.processMs(), r.servingMs(), sum.hadoopShuffleThreadsMs(), sum.rdmaServingThreadsMs(),
                sum.rdmaOtherThreadsMs(), r.servingMsPerGb(),
                r.processMsPerGb(), sum.byName(), r.perNm());
    }

    private static void print(List<Run> runs, long rows, int maps, int reduces) {
        System.out.printf(Locale.ROOT, "%nTeraSort %,d rows (%d MB of map output, uncompressed), %d maps, %d reduces,"
                + " one NodeManager per host, %d rounds alternating; outputs identical in every run%n", rows,
                rows * TeraRows.ROW_BYTES / 1_000_000, maps, reduces, runs.size() / 2);
        System.out.println("| round | shuffle | job ms | copy ms | final merge ms | shuffled MB | NM CPU ms, serving"
                + " threads | NM CPU ms, rdma's other threads | NM CPU ms, whole processes | serving ms per GB"
                + " | whole ms per GB | task CPU ms | partitions READ | via HTTP |");
        System.out.println("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for (Run r : runs) {
            System.out.printf(Locale.ROOT, "| %d | %s | %,d | %,.0f | %,.0f | %,d | %,d | %,d | %,d | %,.0f | %,.0f"
                            + " | %,d | %d | %d |%n", r.round(), r.shuffle().equals("rdma") ? "rdma" : "Hadoop",
                    r.jobMs(), r.copyMs(), r.finalMergeMs(), r.shuffleBytes() / 1_000_000, r.servingMs(),
                    r.cpu().rdmaOtherThreadsMs(),
                    r.cpu().processMs(), r.servingMsPerGb(), r.processMsPerGb(), r.taskCpuMs(), r.read(),
                    r.viaHttp());
        }
        System.out.println();
        System.out.println("Medians (each column's own), rdma-shuffle (tcp) / Hadoop's HTTP shuffle:");
        System.out.println("| metric | Hadoop shuffle (HTTP) | rdma-shuffle (tcp) | rdma / Hadoop |");
        System.out.println("| --- | --- | --- | --- |");
        row(runs, "copy phase, two hosts", Run::copyMs);
        row(runs, "NodeManager CPU per GB served, two hosts", Run::servingMsPerGb);
        row(runs, "NodeManager CPU per GB served, whole process, two hosts", Run::processMsPerGb);
        row(runs, "job, two hosts", r -> r.jobMs());
        row(runs, "final merge, two hosts", Run::finalMergeMs);
        row(runs, "task CPU, two hosts", r -> r.taskCpuMs());
        System.out.println("(copy phase, job, final merge: ms; NodeManager CPU: ms per GB of REDUCE_SHUFFLE_BYTES,"
                + " both NodeManagers; serving threads: Hadoop's ShuffleHandler Netty threads in a Hadoop run,"
                + " rdma-shuffle's responder, REGISTER workers and openers and those in an rdma run)");
    }

    private static void row(List<Run> runs, String name, ToDoubleFunction<Run> metric) {
        double h = median(runs, "hadoop", metric);
        double r = median(runs, "rdma", metric);
        System.out.printf(Locale.ROOT, "| %s | %.0f | %.0f | %.2f |%n", name, h, r, r / h);
    }

    private static double median(List<Run> runs, String shuffle, ToDoubleFunction<Run> metric) {
        double[] v = runs.stream().filter(r -> r.shuffle().equals(shuffle)).mapToDouble(metric).sorted().toArray();
        return v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
    }

    /** Where the job's attempts ran: "maps host=count..., reduces host=count...", from the completion events. */
    private static String placement(JobResult job) {
        return "maps " + hosts(job.succeededAttempts(true)) + ", reduces " + hosts(job.succeededAttempts(false));
    }

    private static Map<String, Integer> hosts(List<TaskCompletionEvent> events) {
        Map<String, Integer> byHost = new TreeMap<>();
        for (TaskCompletionEvent e : events) {
            byHost.merge(URI.create(e.getTaskTrackerHttp()).getHost(), 1, Integer::sum);
        }
        return byHost;
    }

    /** rdma-shuffle's own breakdown of its reducers' shuffle, per reducer (the fetcher threads' sums). */
    private static String where(JobResult job, int reduces) {
        return String.format(Locale.ROOT,
                "(per reducer: open %d ms, REGISTER %d ms, READ wait %d ms, merge copy %d ms)",
                job.counter(RdmaShuffleCounter.OPEN_MILLIS) / reduces,
                job.counter(RdmaShuffleCounter.REGISTER_MILLIS) / reduces,
                job.counter(RdmaShuffleCounter.READ_WAIT_MILLIS) / reduces,
                job.counter(RdmaShuffleCounter.MERGE_COPY_MILLIS) / reduces);
    }

    /** Waits up to three minutes for {@code count} NodeManagers to be RUNNING at the ResourceManager. */
    private static void waitForNodeManagers(JobConf conf, int count) throws Exception {
        try (YarnClient yarn = YarnClient.createYarnClient()) {
            yarn.init(conf);
            yarn.start();
            List<NodeReport> nodes = List.of();
            long deadline = System.nanoTime() + 180_000_000_000L;
            for (; System.nanoTime() < deadline; Thread.sleep(500)) {
                nodes = yarn.getNodeReports(NodeState.RUNNING);
                if (nodes.size() >= count) {
                    System.out.println("NodeManagers running: " + Arrays.toString(nodes.stream()
                            .map(n -> n.getNodeId() + " " + n.getCapability()).toArray()));
                    return;
                }
            }
            throw new IllegalStateException(count + " NodeManagers were expected, " + nodes.size() + " are running");
        }
    }
}
