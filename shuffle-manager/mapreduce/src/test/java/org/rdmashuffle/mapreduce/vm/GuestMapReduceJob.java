package org.rdmashuffle.mapreduce.vm;

import java.io.File;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.MRConfig;
import org.apache.hadoop.mapreduce.MRJobConfig;
import org.apache.hadoop.mapreduce.TaskCounter;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.rdmashuffle.mapreduce.MapReduceRdmaConf;
import org.rdmashuffle.mapreduce.RdmaShuffle;
import org.rdmashuffle.mapreduce.RdmaShuffleCounter;
import org.rdmashuffle.mapreduce.cluster.MapReduceCluster;
import org.rdmashuffle.mapreduce.jobs.JobResult;
import org.rdmashuffle.mapreduce.jobs.TeraRows;
import org.rdmashuffle.mapreduce.jobs.TeraSort;

/**
 * Part {@code mapreduce} of {@code benchmarks/verbs-vm/run.sh}: one TeraSort on a two-NodeManager
 * {@link MapReduceCluster} (a MiniMRYarnCluster) whose NodeManagers run rdma-shuffle's drop-in service as
 * {@code mapreduce_shuffle} (Hadoop's HTTP shuffle and READs from one service), once with Hadoop's own shuffle
 * consumer (HTTP) and once with {@link RdmaShuffle}, the same input both times. The service and the reducers use
 * the provider given ({@code verbs} in the guest, {@code tcp} for a check on any host) with
 * {@code fallback=never}. Task JVMs are the JDK this class runs on ({@code JAVA_HOME} of every container) with
 * {@code --enable-native-access=ALL-UNNAMED}.
 *
 * <p>Prints, for a script to read: one {@code MRJOB shuffle=http|rdma ...} line per job (its wall time, Hadoop's
 * shuffle counters, rdma-shuffle's counters, this JVM's CPU during the job and that CPU per GB of shuffle bytes:
 * this JVM holds the job client, the ResourceManager, both NodeManagers and their services, so for a job of a few
 * MB heartbeats and scheduling dominate it); the threads of this JVM that took the most CPU during each job
 * ({@code MRTHREADS}); the shuffle services' own threads' CPU per GB served ({@code MRSERVICE}); {@code MRCLUSTER
 * dir=...} (the NodeManagers' log dirs, with every container's syslog, are under it); and a final
 * {@code MRCHECK ...} line: {@code outputs identical} when both jobs succeeded and wrote the same bytes, rows
 * sorted and the input's checksum; else what differs. Exit 0 only then (the harness judges counters and logs).
 *
 * <p>Arguments: {@code --provider verbs|tcp} (verbs), {@code --bind ADDRESS|INTERFACE}
 * ({@code mapreduce.shuffle.rdma.bindAddress} of the services and reducers; unset by default), {@code --api ffm|disni}
 * ({@code verbs.api}, ffm), {@code --rows N} (50,000: 5 MB), {@code --maps M} (4), {@code --reduces R} (2),
 * {@code --order http,rdma}, {@code --task-opts "..."} (more options for every task JVM).
 */
public final class GuestMapReduceJob {
    private static final long SEED = 0x36L;

    private GuestMapReduceJob() {
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>(Map.of("--provider", "verbs", "--api", "ffm", "--rows", "50000",
                "--maps", "4", "--reduces", "2", "--order", "http,rdma", "--bind", "", "--task-opts", ""));
        for (int i = 0; i < args.length; i += 2) {
            if (!a.containsKey(args[i]) || i + 1 >= args.length) {
                throw new IllegalArgumentException("bad argument " + args[i] + "; known: " + a.keySet());
            }
            a.put(args[i], args[i + 1]);
        }
        long rows = Long.parseLong(a.get("--rows"));
        int maps = Integer.parseInt(a.get("--maps"));
        int reduces = Integer.parseInt(a.get("--reduces"));
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        Map<String, String> rdma = new HashMap<>();
        rdma.put(MapReduceRdmaConf.PORT, Integer.toString(port));
        rdma.put(MapReduceRdmaConf.PREFIX + "provider", a.get("--provider"));
        rdma.put(MapReduceRdmaConf.PREFIX + "fallback", "never");
        rdma.put(MapReduceRdmaConf.PREFIX + "verbs.api", a.get("--api"));
        if (!a.get("--bind").isEmpty()) {
            rdma.put(MapReduceRdmaConf.BIND_ADDRESS, a.get("--bind"));
        }
        System.out.printf(Locale.ROOT, "MRSTART TeraSort rows=%d (%d MB) maps=%d reduces=%d order=%s settings=%s%n",
                rows, rows * TeraRows.ROW_BYTES >> 20, maps, reduces, a.get("--order"), rdma);
        MapReduceCluster.Builder builder = MapReduceCluster.builder("GuestMapReduceJob").withRdmaService(true);
        rdma.forEach(builder::nodeManagerSetting);
        Map<String, Path> outputs = new HashMap<>();
        Map<String, JobResult> results = new HashMap<>();
        try (MapReduceCluster cluster = builder.start()) {
            System.out.println("MRCLUSTER dir=" + cluster.clusterDir() + " start_ms=" + cluster.startMs()
                    + " rdma_service=" + cluster.rdmaServiceRunning());
            if (!cluster.rdmaServiceRunning()) {
                throw new IllegalStateException("the NodeManagers do not run " + MapReduceCluster.RDMA_SERVICE_CLASS);
            }
            Path input = new Path(cluster.workDir(), "input");
            TeraRows.writeFiles(input, rows, maps, SEED);
            for (String shuffle : a.get("--order").split(",")) {
                Configuration conf = cluster.jobConf();
                conf.setLong(FileInputFormat.SPLIT_MAXSIZE, rows / maps * TeraRows.ROW_BYTES);
                taskJvms(conf, a.get("--task-opts"));
                if (shuffle.equals("rdma")) {
                    conf.set(MRConfig.SHUFFLE_CONSUMER_PLUGIN, RdmaShuffle.class.getName());
                    rdma.forEach(conf::set);
                } else if (!shuffle.equals("http")) {
                    throw new IllegalArgumentException("--order takes http and rdma, not " + shuffle);
                }
                Path out = new Path(cluster.workDir(), "sorted-" + shuffle);
                Map<Long, long[]> threads0 = threadCpu();
                long cpu0 = processCpuNs();
                JobResult job = TeraSort.run(conf, input, out, reduces);
                long cpuNs = processCpuNs() - cpu0;
                print(shuffle, job, cpuNs);
                printThreads(shuffle, threads0, job.counter(TaskCounter.REDUCE_SHUFFLE_BYTES));
                results.put(shuffle, job);
                outputs.put(shuffle, out);
            }
        }
        String check = check(results, outputs, rows / maps * maps); // writeFiles: rows / maps per file
        System.out.println("MRCHECK " + check);
        System.exit(check.startsWith("outputs identical") ? 0 : 1);
    }

    /** Every task JVM (and the AM) on this JDK, with native access for java.lang.foreign, plus {@code extra}. */
    private static void taskJvms(Configuration conf, String extra) {
        String home = "JAVA_HOME=" + System.getProperty("java.home");
        String opts = " --enable-native-access=ALL-UNNAMED " + extra;
        for (String key : new String[] {MRJobConfig.MAP_JAVA_OPTS, MRJobConfig.REDUCE_JAVA_OPTS,
                MRJobConfig.MR_AM_COMMAND_OPTS}) {
            conf.set(key, conf.get(key, "") + opts);
        }
        for (String key : new String[] {MRJobConfig.MAP_ENV, MRJobConfig.REDUCE_ENV, MRJobConfig.MR_AM_ENV}) {
            conf.set(key, home);
        }
    }

    private static void print(String shuffle, JobResult job, long cpuNs) {
        long bytes = job.counter(TaskCounter.REDUCE_SHUFFLE_BYTES);
        StringBuilder line = new StringBuilder(String.format(Locale.ROOT,
                "MRJOB shuffle=%s job=%s succeeded=%s job_ms=%d SHUFFLED_MAPS=%d REDUCE_SHUFFLE_BYTES=%d"
                        + " FAILED_SHUFFLE=%d REDUCE_OUTPUT_RECORDS=%d", shuffle, job.jobId(), job.succeeded(),
                job.elapsedMs(), job.counter(TaskCounter.SHUFFLED_MAPS), bytes,
                job.counter(TaskCounter.FAILED_SHUFFLE), job.counter(TaskCounter.REDUCE_OUTPUT_RECORDS)));
        for (RdmaShuffleCounter c : RdmaShuffleCounter.values()) {
            line.append(' ').append(c.name()).append('=').append(job.counter(c));
        }
        line.append(String.format(Locale.ROOT, " cluster_cpu_ms=%d cluster_cpu_s_per_gb=%.1f", cpuNs / 1_000_000,
                bytes == 0 ? Double.NaN : cpuNs / 1e9 / (bytes / 1e9)));
        System.out.println(line);
    }

    /** CPU of every live thread of this JVM: id to {cpu ns}. */
    private static Map<Long, long[]> threadCpu() {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        Map<Long, long[]> cpu = new HashMap<>();
        for (long id : mx.getAllThreadIds()) {
            cpu.put(id, new long[] {mx.getThreadCpuTime(id)});
        }
        return cpu;
    }

    /**
     * The eight threads of this JVM that took the most CPU since {@code before}, and the CPU of the shuffle services'
     * threads per GB of {@code bytes} served: Hadoop's HTTP side ({@code ShuffleHandler Netty*}) and rdma-shuffle's
     * ({@code rdma-*}: the tcp provider's responder, the verbs provider's threads, REGISTER workers). Threads that
     * ended before the job did are not seen.
     */
    private static void printThreads(String shuffle, Map<Long, long[]> before, long bytes) {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        record T(String name, long ns) {
        }
        T[] all = Arrays.stream(mx.getThreadInfo(mx.getAllThreadIds())).filter(t -> t != null).map(t -> {
            long now = mx.getThreadCpuTime(t.getThreadId());
            long[] was = before.get(t.getThreadId());
            return new T(t.getThreadName(), Math.max(0, now - (was == null ? 0 : was[0])));
        }).sorted((x, y) -> Long.compare(y.ns(), x.ns())).toArray(T[]::new);
        StringBuilder line = new StringBuilder("MRTHREADS shuffle=" + shuffle);
        for (int i = 0; i < Math.min(8, all.length); i++) {
            line.append(String.format(Locale.ROOT, " [%s]=%dms", all[i].name(), all[i].ns() / 1_000_000));
        }
        System.out.println(line);
        long http = Arrays.stream(all).filter(t -> t.name().startsWith("ShuffleHandler Netty")).mapToLong(T::ns).sum();
        long rdma = Arrays.stream(all).filter(t -> t.name().startsWith("rdma-")).mapToLong(T::ns).sum();
        System.out.printf(Locale.ROOT, "MRSERVICE shuffle=%s served_bytes=%d http_threads_ms=%d rdma_threads_ms=%d"
                + " service_cpu_s_per_gb=%.2f%n", shuffle, bytes, http / 1_000_000, rdma / 1_000_000,
                bytes == 0 ? Double.NaN : (http + rdma) / 1e9 / (bytes / 1e9));
    }

    private static long processCpuNs() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    /** Both jobs succeeded, wrote the same part files byte for byte, in key order, with the input's rows. */
    private static String check(Map<String, JobResult> results, Map<String, Path> outputs, long rows)
            throws IOException {
        for (Map.Entry<String, JobResult> e : results.entrySet()) {
            if (!e.getValue().succeeded()) {
                return "job " + e.getValue().jobId() + " (" + e.getKey() + ") FAILED";
            }
        }
        if (!results.containsKey("http") || !results.containsKey("rdma")) {
            return "FAILED: both http and rdma are needed in --order";
        }
        FileSystem fs = FileSystem.getLocal(new Configuration());
        File[] http = parts(fs, outputs.get("http"));
        File[] rdma = parts(fs, outputs.get("rdma"));
        if (http.length != rdma.length) {
            return "outputs DIFFER: " + http.length + " part files under http, " + rdma.length + " under rdma";
        }
        long bytes = 0;
        long sum = 0;
        long count = 0;
        byte[] last = null;
        for (int i = 0; i < http.length; i++) {
            byte[] h = Files.readAllBytes(http[i].toPath());
            byte[] r = Files.readAllBytes(rdma[i].toPath());
            if (!http[i].getName().equals(rdma[i].getName()) || !Arrays.equals(h, r)) {
                return "outputs DIFFER: " + http[i] + " and " + rdma[i];
            }
            bytes += h.length;
            for (int off = 0; off + TeraRows.ROW_BYTES <= h.length; off += TeraRows.ROW_BYTES) {
                byte[] key = Arrays.copyOfRange(h, off, off + TeraRows.KEY_BYTES);
                if (last != null && TeraRows.compareKeys(last, last.length, key, key.length) > 0) {
                    return "outputs identical but NOT sorted at byte " + off + " of " + http[i];
                }
                last = key;
                sum += TeraRows.hash(h, off, TeraRows.ROW_BYTES);
                count++;
            }
        }
        TeraRows.Checksum want = TeraRows.expected(SEED, rows);
        TeraRows.Checksum got = new TeraRows.Checksum(count, sum);
        if (!want.equals(got)) {
            return "outputs identical but NOT the input's rows: " + got + ", the input has " + want;
        }
        return "outputs identical (" + http.length + " part files, " + bytes + " bytes, " + got
                + ", sorted, equal to the input's)";
    }

    private static File[] parts(FileSystem fs, Path dir) throws IOException {
        FileStatus[] st = fs.listStatus(dir, p -> p.getName().startsWith("part-"));
        return Arrays.stream(st).map(s -> new File(s.getPath().toUri())).sorted().toArray(File[]::new);
    }
}
