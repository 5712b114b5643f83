package org.rdmashuffle.mapreduce.bench;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocatedFileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RemoteIterator;
import org.apache.hadoop.mapreduce.MRConfig;
import org.apache.hadoop.mapreduce.TaskCounter;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.mapreduce.jobhistory.JobHistoryParser;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.mapreduce.v2.jobhistory.JobHistoryUtils;
import org.rdmashuffle.mapreduce.MapReduceRdmaConf;
import org.rdmashuffle.mapreduce.RdmaShuffle;
import org.rdmashuffle.mapreduce.RdmaShuffleCounter;
import org.rdmashuffle.mapreduce.cluster.MapReduceCluster;
import org.rdmashuffle.mapreduce.jobs.JobResult;
import org.rdmashuffle.mapreduce.jobs.TeraRows;
import org.rdmashuffle.mapreduce.jobs.TeraSort;

/**
 * The MapReduce comparison ({@code examples/run-mapreduce.sh}): TeraSort under Hadoop's HTTP shuffle and under
 * rdma-shuffle, alternately, on one two-NodeManager MiniMRYarnCluster (both NodeManagers run both services), the
 * same input each time. Per job: wall time; shuffle phase (each reducer's start to its shuffle's end, from the
 * job history file, mean over reducers); task CPU (the tasks' CPU_MILLISECONDS); daemon CPU (this process: the
 * ResourceManager, NodeManagers and their shuffle services). Every run's output must equal the first run's.
 *
 * <p>Arguments: {@code --rows N} (default 2,000,000: 200 MB), {@code --maps M} (8), {@code --reduces R} (4),
 * {@code --rounds K} (3), {@code --jfr DIR} (a JFR recording of every reducer under {@code DIR/round<k>-<shuffle>/};
 * off by default).
 */
public final class MapReduceComparison {
    /** One job; in a median row every number is the median of its own column (copyMs too). */
    private record Run(String shuffle, long jobMs, double shuffleMs, double mergeMs, double runMs, double copyMs,
                       long taskCpuMs, long daemonCpuMs, long read, long viaHttp, long checksum, String where) {
    }

    /** Means over a job's reducers: start to the end of the copy phase, and the final merge (copy end to sort end). */
    record Phases(double toShuffleEndMs, double finalMergeMs) {
    }

    private MapReduceComparison() {
    }

    public static void main(String[] args) throws Exception {
        long rows = 2_000_000;
        int maps = 8;
        int reduces = 4;
        int rounds = 3;
        String jfr = null;
        for (int i = 0; i < args.length; i += 2) {
            String v = i + 1 < args.length ? args[i + 1] : null;
            switch (args[i]) {
                case "--rows" -> rows = Long.parseLong(v);
                case "--maps" -> maps = Integer.parseInt(v);
                case "--reduces" -> reduces = Integer.parseInt(v);
                case "--rounds" -> rounds = Integer.parseInt(v);
                case "--jfr" -> jfr = v;
                default -> throw new IllegalArgumentException("unknown argument " + args[i]
                        + " (--rows N --maps M --reduces R --rounds K --jfr DIR)");
            }
        }
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        List<Run> runs = new ArrayList<>();
        try (MapReduceCluster cluster = MapReduceCluster.builder("MapReduceComparison").withRdmaService(true)
                .nodeManagerSetting(MapReduceRdmaConf.PORT, Integer.toString(port))
                .nodeManagerSetting(MapReduceRdmaConf.PREFIX + "provider", "tcp")
                .nodeManagerSetting(MapReduceRdmaConf.BIND_HOST, "127.0.0.1").start()) {
            Path input = new Path(cluster.workDir(), "input");
            TeraRows.writeFiles(input, rows, maps, 0x5EEDL);
            for (int round = 0; round < rounds; round++) {
                for (boolean rdma : new boolean[] {false, true}) {
                    Configuration conf = cluster.jobConf();
                    conf.setLong(FileInputFormat.SPLIT_MAXSIZE, rows / maps * TeraRows.ROW_BYTES);
                    conf.set(MRConfig.SHUFFLE_CONSUMER_PLUGIN, TimedShuffle.class.getName());
                    if (jfr != null) { // a flight recording of every reducer, in a directory per run
                        java.io.File runDir = new java.io.File(jfr, "round" + (round + 1) + (rdma ? "-rdma" : "-hadoop"));
                        if (!runDir.mkdirs() && !runDir.isDirectory()) {
                            throw new IOException("cannot create " + runDir);
                        }
                        conf.set(org.apache.hadoop.mapreduce.MRJobConfig.REDUCE_JAVA_OPTS,
                                conf.get(org.apache.hadoop.mapreduce.MRJobConfig.REDUCE_JAVA_OPTS, "")
                                        + " -XX:StartFlightRecording=settings=profile,filename="
                                        + runDir.getAbsolutePath() + "/");
                    }
                    if (rdma) {
                        conf.set(TimedShuffle.PLUGIN, RdmaShuffle.class.getName());
                        conf.set(MapReduceRdmaConf.PORT, Integer.toString(port));
                        conf.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
                    }
                    Path out = new Path(cluster.workDir(), "sorted-" + round + (rdma ? "-rdma" : "-http"));
                    long cpu0 = processCpuMs();
                    JobResult job = TeraSort.run(conf, input, out, reduces);
                    long daemonCpu = processCpuMs() - cpu0;
                    if (!job.succeeded()) {
                        throw new IllegalStateException("TeraSort failed: " + job.jobId());
                    }
                    Phases phases = phases(conf, job);
                    Run r = new Run(rdma ? "rdma" : "hadoop", job.elapsedMs(), phases.toShuffleEndMs(),
                            phases.finalMergeMs(),
                            job.counter(TimedShuffle.Timing.SHUFFLE_RUN_MILLIS) / (double) reduces,
                            job.counter(TimedShuffle.Timing.SHUFFLE_RUN_MILLIS) / (double) reduces
                                    - phases.finalMergeMs(),
                            job.counter(TaskCounter.CPU_MILLISECONDS), daemonCpu,
                            job.counter(RdmaShuffleCounter.MAPS_READ), job.counter(RdmaShuffleCounter.MAPS_VIA_HTTP),
                            checksum(out), rdma ? where(job, reduces) : "");
                    if (!runs.isEmpty() && runs.get(0).checksum() != r.checksum()) {
                        throw new IllegalStateException("output of " + job.jobId() + " differs from the first run's");
                    }
                    runs.add(r);
                    System.out.printf(Locale.ROOT, "round %d %-6s job %6d ms  reducer start to shuffle end %7.0f ms"
                            + "  shuffle run %7.0f ms (copy %5.0f, final merge %5.0f)  task cpu %6d ms  daemon cpu %6d"
                            + " ms  READ %d  http %d %s%n", round + 1, r.shuffle(), r.jobMs(), r.shuffleMs(), r.runMs(),
                            r.copyMs(), r.mergeMs(), r.taskCpuMs(), r.daemonCpuMs(), r.read(), r.viaHttp(), r.where());
                }
            }
        }
        print(runs, rows, maps, reduces);
    }

    private static void print(List<Run> runs, long rows, int maps, int reduces) {
        Run h = median(runs, "hadoop");
        Run r = median(runs, "rdma");
        System.out.printf(Locale.ROOT, "%nTeraSort %,d rows (%d MB), %d maps, %d reduces, two NodeManagers, %d rounds"
                + " (medians; outputs identical in every run)%n", rows, rows * TeraRows.ROW_BYTES >> 20, maps, reduces,
                runs.size() / 2);
        System.out.println("| metric | Hadoop shuffle (HTTP) | rdma-shuffle (tcp) | rdma / Hadoop |");
        System.out.println("| --- | --- | --- | --- |");
        row("job time (ms)", h.jobMs(), r.jobMs());
        row("shuffle phase per reducer: the plugin's run (ms)", h.runMs(), r.runMs());
        row("  of which copying map outputs (ms)", h.copyMs(), r.copyMs());
        row("  of which the final merge, Hadoop's MergeManager in both (ms)", h.mergeMs(), r.mergeMs());
        row("reducer start to shuffle end, per reducer (ms)", h.shuffleMs(), r.shuffleMs());
        row("task CPU (ms)", h.taskCpuMs(), r.taskCpuMs());
        row("daemon CPU: RM, NMs, shuffle services (ms)", h.daemonCpuMs(), r.daemonCpuMs());
        System.out.println("rdma-shuffle's run, median job " + r.where());
    }

    private static void row(String name, double hadoop, double rdma) {
        System.out.printf(Locale.ROOT, "| %s | %.0f | %.0f | %.2f |%n", name, hadoop, rdma, rdma / hadoop);
    }

    /** The run of {@code shuffle} with the median job time. */
    private static Run median(List<Run> runs, String shuffle) {
        Run[] of = runs.stream().filter(r -> r.shuffle().equals(shuffle)).sorted((a, b) -> Long.compare(a.jobMs(),
                b.jobMs())).toArray(Run[]::new);
        Run m = of[of.length / 2];
        double[] sh = Arrays.stream(of).mapToDouble(Run::shuffleMs).sorted().toArray();
        double[] rn = Arrays.stream(of).mapToDouble(Run::runMs).sorted().toArray();
        double[] mg = Arrays.stream(of).mapToDouble(Run::mergeMs).sorted().toArray();
        double[] cp = Arrays.stream(of).mapToDouble(Run::copyMs).sorted().toArray();
        long[] tc = Arrays.stream(of).mapToLong(Run::taskCpuMs).sorted().toArray();
        long[] dc = Arrays.stream(of).mapToLong(Run::daemonCpuMs).sorted().toArray();
        return new Run(shuffle, m.jobMs(), sh[sh.length / 2], mg[mg.length / 2], rn[rn.length / 2], cp[cp.length / 2],
                tc[tc.length / 2], dc[dc.length / 2], m.read(), m.viaHttp(), m.checksum(), m.where());
    }

    /** rdma-shuffle's own breakdown of its reducers' shuffle, per reducer (the fetcher threads' sums). */
    private static String where(JobResult job, int reduces) {
        return String.format(Locale.ROOT, "(per reducer: open %d ms, REGISTER %d ms, READ wait %d ms, merge copy %d ms)",
                job.counter(RdmaShuffleCounter.OPEN_MILLIS) / reduces,
                job.counter(RdmaShuffleCounter.REGISTER_MILLIS) / reduces,
                job.counter(RdmaShuffleCounter.READ_WAIT_MILLIS) / reduces,
                job.counter(RdmaShuffleCounter.MERGE_COPY_MILLIS) / reduces);
    }

    private static long processCpuMs() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime() / 1_000_000;
    }

    /** Means over the job's reduce attempts, from the job's history file. */
    static Phases phases(Configuration conf, JobResult job) throws IOException, InterruptedException {
        Path done = new Path(JobHistoryUtils.getConfiguredHistoryIntermediateDoneDirPrefix(conf));
        FileSystem fs = done.getFileSystem(conf);
        String id = job.jobId().toString();
        for (int wait = 0; wait < 200; wait++) {
            if (fs.exists(done)) {
                RemoteIterator<LocatedFileStatus> files = fs.listFiles(done, true);
                while (files.hasNext()) {
                    LocatedFileStatus f = files.next();
                    if (f.getPath().getName().startsWith(id) && f.getPath().getName().endsWith(".jhist")) {
                        JobHistoryParser.JobInfo info = new JobHistoryParser(fs, f.getPath()).parse();
                        double sum = 0;
                        double merge = 0;
                        int n = 0;
                        for (JobHistoryParser.TaskInfo t : info.getAllTasks().values()) {
                            if (t.getTaskType() != TaskType.REDUCE) {
                                continue;
                            }
                            JobHistoryParser.TaskAttemptInfo a = t.getAllTaskAttempts().get(t.getSuccessfulAttemptId());
                            sum += a.getShuffleFinishTime() - a.getStartTime();
                            merge += a.getSortFinishTime() - a.getShuffleFinishTime();
                            n++;
                        }
                        return n == 0 ? new Phases(Double.NaN, Double.NaN) : new Phases(sum / n, merge / n);
                    }
                }
            }
            Thread.sleep(100);
        }
        throw new IOException("no history file of " + id + " under " + done);
    }

    /** Checksum of every row of every part file under {@code dir}, in order of every part file under {@code dir}. */
    static long checksum(Path dir) throws IOException {
        FileSystem fs = FileSystem.getLocal(new Configuration());
        byte[] row = new byte[TeraRows.ROW_BYTES];
        long sum = 0;
        FileStatus[] parts = fs.listStatus(dir, p -> p.getName().startsWith("part-"));
        Arrays.sort(parts, (a, b) -> a.getPath().getName().compareTo(b.getPath().getName()));
        for (FileStatus part : parts) {
            try (var in = fs.open(part.getPath())) {
                for (long r = part.getLen() / TeraRows.ROW_BYTES; r > 0; r--) {
                    in.readFully(row);
                    sum = sum * 31 + TeraRows.hash(row, 0, TeraRows.ROW_BYTES); // order matters: sorted output
                }
            }
        }
        return sum;
    }

}
