package org.rdmashuffle.vmbench;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.metrics.source.Source;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * The fetch-bound job of benchmarks/verbs-vm (part {@code spark}): two executor JVMs on
 * {@code local-cluster[2,1,MB]} in the guest, one that only serves and one that only reads. Every map task
 * runs on the serving executor (location preference on that executor, a locality wait longer than the job),
 * every reduce task on the receiving one (the shuffled RDD zipped with an RDD that prefers it), so each byte
 * a reducer fetches crosses from one JVM to the other: over siw READs under rdma-shuffle's verbs provider,
 * over Spark's block transfer service (TCP over the same address) under the sort shuffle. Shuffle
 * compression and host-local disk reads are off, records are large byte arrays: the reduce stage only
 * fetches, deserialises and sums a few words per record.
 *
 * <p>For each manager ({@code --order}, e.g. {@code sort,rdma,sort,rdma}) a fresh application: one job
 * runs the map and the reduce stage, {@code --warmups} more run the reduce stage (JIT warm-up), 5 idle seconds
 * show what the JVMs spend doing nothing, then {@code --rounds} jobs run only the reduce stage (the map
 * stage is skipped, its outputs are kept), each bracketed by the two executors' utime+stime
 * ({@code /proc/<pid>/stat}), the guest's {@code /proc/stat} and, under rdma, the executors' transport
 * counters. Prints one {@code FETCH} line per measured job and a {@code FETCHSUMMARY} with medians and the
 * rdma/sort ratios; exits non-zero when results differ between jobs or managers, a task ran on the wrong
 * executor, or an rdma reduce fetched without READs.
 *
 * <p>Options: {@code --mb 256 --record-kb 64 --maps 8 --reducers 8 --warmups 1 --rounds 3 --order sort,rdma
 * --executor-mb 1024 --jars a.jar,b.jar --conf k=v} (applied to both managers) {@code --rdma-conf k=v}
 * (rdma only). Needs SPARK_HOME and SPARK_LOCAL_IP.
 */
public final class GuestFetchJob {
    private static final String RDMA_MANAGER = "org.rdmashuffle.shuffle.RdmaShuffleManager";
    private static final long TICKS_PER_SECOND = 100;  // USER_HZ on Linux x86-64
    /** The plugin's source in Spark's metrics system (docs/deploying.md, its gauges). */
    private static final String METRICS_SOURCE = "rdmaShuffle";
    /** Longer than the source's snapshot age (200 ms): a gauge read after it counts the job that just ended. */
    private static final long METRICS_SNAPSHOT_WAIT_MS = 300;

    private GuestFetchJob() {
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> o = new TreeMap<>(Map.of("--mb", "256", "--record-kb", "64", "--maps", "8",
                "--reducers", "8", "--rounds", "3", "--warmups", "1", "--order", "sort,rdma", "--executor-mb", "1024", "--jars", ""));
        List<String[]> conf = new ArrayList<>();
        List<String[]> rdmaConf = new ArrayList<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--conf" -> conf.add(args[i + 1].split("=", 2));
                case "--rdma-conf" -> rdmaConf.add(args[i + 1].split("=", 2));
                default -> {
                    if (!o.containsKey(args[i])) {
                        throw new IllegalArgumentException("unknown option " + args[i]);
                    }
                    o.put(args[i], args[i + 1]);
                }
            }
        }
        int recordBytes = Integer.parseInt(o.get("--record-kb")) * 1024;
        int maps = Integer.parseInt(o.get("--maps"));
        int reducers = Integer.parseInt(o.get("--reducers"));
        long records = Long.parseLong(o.get("--mb")) * 1024 * 1024 / recordBytes;
        int perMap = (int) (records / maps);
        int rounds = Integer.parseInt(o.get("--rounds"));
        int warmups = Integer.parseInt(o.get("--warmups"));
        List<String> order = List.of(o.get("--order").split(","));
        System.out.printf(Locale.ROOT, "fetch job: %d maps x %d records of %d KiB (%d MiB), %d reducers, "
                + "%d measured reduce-only jobs per application, order %s%n", maps, perMap, recordBytes / 1024,
                (long) maps * perMap * recordBytes >> 20, reducers, rounds, order);

        List<String> reference = null;
        Map<String, List<Measured>> byManager = new TreeMap<>();
        for (String manager : order) {
            boolean rdma = manager.equals("rdma");
            SparkConf sc = new SparkConf()
                    .setMaster("local-cluster[2,1," + o.get("--executor-mb") + "]")
                    .setAppName("guest-fetch-" + manager)
                    .set("spark.ui.enabled", "false")
                    .set("spark.executor.memory", o.get("--executor-mb") + "m")
                    .set("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
                    .set("spark.shuffle.compress", "false")
                    .set("spark.shuffle.readHostLocalDisk", "false")
                    .set("spark.shuffle.reduceLocality.enabled", "false")
                    .set("spark.locality.wait", "30min")
                    .set("spark.speculation", "false");
            if (!o.get("--jars").isEmpty()) {
                sc.set("spark.jars", o.get("--jars"));
            }
            for (String[] kv : conf) {
                sc.set(kv[0], kv[1]);
            }
            if (rdma) {
                sc.set("spark.shuffle.manager", RDMA_MANAGER);
                for (String[] kv : rdmaConf) {
                    sc.set(kv[0], kv[1]);
                }
            }
            try (JavaSparkContext jsc = new JavaSparkContext(sc)) {
                List<Measured> measured = runApplication(jsc, manager, maps, perMap, recordBytes, reducers,
                        warmups, rounds);
                byManager.computeIfAbsent(manager, k -> new ArrayList<>()).addAll(measured);
                for (Measured m : measured) {
                    if (reference == null) {
                        reference = m.result;
                    } else if (!reference.equals(m.result)) {
                        throw new IllegalStateException("results differ: " + manager + " got " + m.result
                                + ", the first job got " + reference);
                    }
                }
            }
        }
        summarise(byManager);
        System.out.println("results identical across every job and manager: " + reference);
    }

    /** One measured reduce-only job. */
    record Measured(String manager, int round, long bytes, double seconds, double servingCpu, double receivingCpu,
                    double guestCpu, double guestKernelCpu, long readsByReceiver, long readsByServer,
                    long bytesReadByReceiver, List<String> result) {
        double gb() {
            return bytes / 1e9;
        }
    }

    private static List<Measured> runApplication(JavaSparkContext jsc, String manager, int maps, int perMap,
                                                 int recordBytes, int reducers, int warmups, int rounds)
            throws Exception {
        String host = jsc.sc().conf().get("spark.driver.host");
        long deadline = System.nanoTime() + 300_000_000_000L;
        while (jsc.sc().getExecutorIds().size() < 2) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("two executors did not register within 300 s");
            }
            Thread.sleep(200);
        }
        List<String> ids = new ArrayList<>(CollectionConverters.asJava(jsc.sc().getExecutorIds()));
        Collections.sort(ids);
        String serving = ids.get(0);
        String receiving = ids.get(1);
        Map<String, Probe> first = probe(jsc, host, ids);
        long servingPid = first.get(serving).pid;
        long receivingPid = first.get(receiving).pid;
        System.out.printf(Locale.ROOT, "%s: serving executor %s (pid %d), receiving executor %s (pid %d)%n", manager,
                serving, servingPid, receiving, receivingPid);

        TaskLog tasks = new TaskLog();
        jsc.sc().addSparkListener(tasks);
        List<Integer> mapIds = new ArrayList<>();
        for (int m = 0; m < maps; m++) {
            mapIds.add(m);
        }
        JavaPairRDD<Integer, byte[]> data = preferring(jsc, mapIds, host, serving)
                .flatMapToPair(m -> new Records(m, perMap, recordBytes));
        JavaPairRDD<Integer, byte[]> shuffled = data.partitionBy(new HashPartitioner(reducers));
        List<Integer> reduceIds = new ArrayList<>();
        for (int r = 0; r < reducers; r++) {
            reduceIds.add(r);
        }
        JavaRDD<String> sums = shuffled.zipPartitions(preferring(jsc, reduceIds, host, receiving),
                (records, reducer) -> List.of(digest(reducer.next(), records)).iterator());

        tasks.reset();
        List<String> warm = new ArrayList<>(sums.collect());
        jsc.sc().listenerBus().waitUntilEmpty(60_000);
        checkPlacement(tasks, manager + " warm-up", serving, receiving, true);
        Collections.sort(warm);
        for (int w = 0; w < warmups; w++) {
            sums.collect();
        }
        // What the executors and the guest spend doing nothing (heartbeats, timers, the JIT finishing),
        // over an idle window as long as a typical job: printed so that a CPU per GB near it reads as "idle".
        Map<String, Long> idleThreads0 = threadTicks(servingPid);
        long idleS0 = processTicks(servingPid);
        long idleR0 = processTicks(receivingPid);
        long[] idleG0 = guestCpu();
        long i0 = System.nanoTime();
        Thread.sleep(5000);
        double idleSeconds = (System.nanoTime() - i0) / 1e9;
        System.out.printf(Locale.ROOT, "IDLE manager=%s seconds=%.1f serving_cpu_s/s=%.3f receiving_cpu_s/s=%.3f "
                + "guest_cpu_s/s=%.3f%n", manager, idleSeconds,
                (processTicks(servingPid) - idleS0) / (double) TICKS_PER_SECOND / idleSeconds,
                (processTicks(receivingPid) - idleR0) / (double) TICKS_PER_SECOND / idleSeconds,
                (guestCpu()[0] - idleG0[0]) / (double) TICKS_PER_SECOND / idleSeconds);
        printBusiestThreads(manager, "idle", servingPid, idleThreads0);

        List<Measured> out = new ArrayList<>();
        for (int round = 1; round <= rounds; round++) {
            Map<String, Probe> before = probe(jsc, host, ids);
            tasks.reset();
            long[] guest0 = guestCpu();
            Map<String, Long> servingThreads0 = threadTicks(servingPid);
            long serving0 = processTicks(servingPid);
            long receiving0 = processTicks(receivingPid);
            long t0 = System.nanoTime();
            List<String> result = new ArrayList<>(sums.collect());
            double seconds = (System.nanoTime() - t0) / 1e9;
            long serving1 = processTicks(servingPid);
            long receiving1 = processTicks(receivingPid);
            long[] guest1 = guestCpu();
            printBusiestThreads(manager, "round " + round, servingPid, servingThreads0);
            jsc.sc().listenerBus().waitUntilEmpty(60_000);
            Map<String, Probe> after = probe(jsc, host, ids);
            checkPlacement(tasks, manager + " round " + round, serving, receiving, false);
            Collections.sort(result);
            if (!result.equals(warm)) {
                throw new IllegalStateException(manager + " round " + round + " differs from its warm-up: " + result);
            }
            long readsByReceiver = after.get(receiving).reads - before.get(receiving).reads;
            long readsByServer = after.get(serving).reads - before.get(serving).reads;
            long bytesByReceiver = after.get(receiving).bytesRead - before.get(receiving).bytesRead;
            if (manager.equals("rdma") && (readsByReceiver <= 0 || readsByServer != 0)) {
                throw new IllegalStateException("rdma round " + round + ": the receiving executor posted "
                        + readsByReceiver + " READs and the serving one " + readsByServer
                        + " (expected > 0 and 0)");
            }
            Measured m = new Measured(manager, round, tasks.bytesRead.get(), seconds,
                    (serving1 - serving0) / (double) TICKS_PER_SECOND,
                    (receiving1 - receiving0) / (double) TICKS_PER_SECOND,
                    (guest1[0] - guest0[0]) / (double) TICKS_PER_SECOND,
                    (guest1[1] - guest0[1]) / (double) TICKS_PER_SECOND, readsByReceiver, readsByServer,
                    bytesByReceiver, result);
            System.out.printf(Locale.ROOT, "FETCH manager=%s round=%d MiB=%.1f seconds=%.2f MiB/s=%.1f "
                    + "serving_cpu_s/GB=%.3f receiving_cpu_s/GB=%.3f guest_cpu_s/GB=%.3f guest_kernel_s/GB=%.3f "
                    + "reads_receiver=%d reads_server=%d bytes_read_receiver=%d%n", manager, round,
                    m.bytes / 1048576.0, seconds, m.bytes / 1048576.0 / seconds, m.servingCpu / m.gb(),
                    m.receivingCpu / m.gb(), m.guestCpu / m.gb(), m.guestKernelCpu / m.gb(), readsByReceiver,
                    readsByServer, bytesByReceiver);
            out.add(m);
        }
        return out;
    }

    private static void summarise(Map<String, List<Measured>> byManager) {
        Map<String, double[]> med = new TreeMap<>();
        for (Map.Entry<String, List<Measured>> e : byManager.entrySet()) {
            List<Measured> ms = e.getValue();
            double[] v = {
                median(ms.stream().mapToDouble(m -> m.bytes / 1048576.0 / m.seconds).toArray()),
                median(ms.stream().mapToDouble(m -> m.servingCpu / m.gb()).toArray()),
                median(ms.stream().mapToDouble(m -> m.receivingCpu / m.gb()).toArray()),
                median(ms.stream().mapToDouble(m -> m.guestCpu / m.gb()).toArray()),
                median(ms.stream().mapToDouble(m -> m.guestKernelCpu / m.gb()).toArray())};
            med.put(e.getKey(), v);
            System.out.printf(Locale.ROOT, "FETCHSUMMARY manager=%s jobs=%d median MiB/s=%.1f serving_cpu_s/GB=%.3f "
                    + "receiving_cpu_s/GB=%.3f guest_cpu_s/GB=%.3f guest_kernel_s/GB=%.3f%n", e.getKey(), ms.size(),
                    v[0], v[1], v[2], v[3], v[4]);
        }
        if (med.containsKey("rdma") && med.containsKey("sort")) {
            double[] r = med.get("rdma");
            double[] s = med.get("sort");
            System.out.printf(Locale.ROOT, "FETCHSUMMARY rdma/sort throughput=%.2f serving_cpu=%.3f receiving_cpu=%.2f "
                    + "guest_cpu=%.2f%n", r[0] / s[0], ratio(r[1], s[1]), ratio(r[2], s[2]), ratio(r[3], s[3]));
        }
    }

    private static double ratio(double a, double b) {
        return b == 0 ? Double.NaN : a / b;
    }

    private static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }

    /** An RDD of {@code values}, one per partition, each preferring executor {@code executorId}. */
    private static <T> JavaRDD<T> preferring(JavaSparkContext jsc, List<T> values, String host, String executorId) {
        List<Tuple2<T, scala.collection.immutable.Seq<String>>> withPrefs = new ArrayList<>();
        for (T v : values) {
            withPrefs.add(new Tuple2<>(v, CollectionConverters.asScala(List.of("executor_" + host + "_" + executorId))
                    .toSeq()));
        }
        @SuppressWarnings("unchecked")
        ClassTag<T> tag = (ClassTag<T>) ClassTag$.MODULE$.AnyRef();
        return JavaRDD.fromRDD(jsc.sc().makeRDD(CollectionConverters.asScala(withPrefs).toSeq(), tag), tag);
    }

    /** Count, key sum and a checksum of a few words of every record of one reduce partition. */
    private static String digest(int reducer, Iterator<Tuple2<Integer, byte[]>> records) {
        long count = 0;
        long keys = 0;
        long bytes = 0;
        long h = 0;
        while (records.hasNext()) {
            Tuple2<Integer, byte[]> r = records.next();
            byte[] v = r._2();
            ByteBuffer b = ByteBuffer.wrap(v).order(ByteOrder.LITTLE_ENDIAN);
            count++;
            keys += r._1();
            bytes += v.length;
            h += (b.getLong(0) ^ b.getLong(v.length / 2 & ~7) * 31 ^ b.getLong(v.length - 8) * 961) + r._1();
        }
        return String.format(Locale.ROOT, "r%d:count=%d,keys=%d,bytes=%d,h=%x", reducer, count, keys, bytes, h);
    }

    /** The records of map task {@code m}: keys spread over every reducer, values with words that depend on both. */
    private static final class Records implements Iterator<Tuple2<Integer, byte[]>> {
        private final int map;
        private final int count;
        private final int size;
        private int i;

        Records(int map, int count, int size) {
            this.map = map;
            this.count = count;
            this.size = size;
        }

        @Override
        public boolean hasNext() {
            return i < count;
        }

        @Override
        public Tuple2<Integer, byte[]> next() {
            int key = map * count + i++;
            byte[] v = new byte[size];
            ByteBuffer b = ByteBuffer.wrap(v).order(ByteOrder.LITTLE_ENDIAN);
            long x = key * 0x9E3779B97F4A7C15L;
            for (int p = 0; p + 8 <= size; p += 8) {
                x = x * 6364136223846793005L + 1442695040888963407L;
                b.putLong(p, x);
            }
            return new Tuple2<>(key, v);
        }
    }

    /**
     * The executors' pids and transport counters, one task on each (location preference). The counters are read
     * as any Spark application can read them, from the plugin's metrics source in the executor's metrics system
     * (no class of the plugin's Spark adapter is named here); its gauges read a snapshot of the counters at most
     * 200 ms old, so the probe waits longer than that before reading (the job it brackets ended before it began).
     */
    record Probe(long pid, long reads, long bytesRead) implements java.io.Serializable {
    }

    private static Map<String, Probe> probe(JavaSparkContext jsc, String host, List<String> ids) {
        Map<String, Probe> out = new TreeMap<>();
        for (String id : ids) {
            List<String> got = preferring(jsc, List.of(id), host, id).map(x -> {
                SparkEnv env = SparkEnv.get();
                long reads = 0;
                long bytes = 0;
                scala.collection.Iterator<Source> sources = env.metricsSystem().getSourcesByName(METRICS_SOURCE)
                        .iterator();
                if (sources.hasNext()) {
                    Thread.sleep(METRICS_SNAPSHOT_WAIT_MS);
                    Map<String, com.codahale.metrics.Gauge> gauges = sources.next().metricRegistry().getGauges();
                    reads = ((Number) gauges.get("transport.readsCompleted").getValue()).longValue();
                    bytes = ((Number) gauges.get("transport.bytesRead").getValue()).longValue();
                }
                return env.executorId() + "\t" + ProcessHandle.current().pid() + "\t" + reads + "\t" + bytes;
            }).collect();
            String[] f = got.get(0).split("\t");
            if (!f[0].equals(id)) {
                throw new IllegalStateException("probe for executor " + id + " ran on executor " + f[0]);
            }
            out.put(id, new Probe(Long.parseLong(f[1]), Long.parseLong(f[2]), Long.parseLong(f[3])));
        }
        return out;
    }

    /** utime + stime of a process, in clock ticks (fields 14 and 15 of /proc/PID/stat). */
    private static long processTicks(long pid) throws IOException {
        String s = Files.readString(Path.of("/proc/" + pid + "/stat"));
        String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
        return Long.parseLong(f[11]) + Long.parseLong(f[12]);
    }

    /** Each thread's utime + stime (ticks), keyed by "name/tid" (/proc/PID/task/TID/stat). */
    private static Map<String, Long> threadTicks(long pid) throws IOException {
        Map<String, Long> out = new TreeMap<>();
        try (var tasks = Files.list(Path.of("/proc/" + pid + "/task"))) {
            for (Path t : (Iterable<Path>) tasks::iterator) {
                try {
                    String s = Files.readString(t.resolve("stat"));
                    String name = s.substring(s.indexOf('(') + 1, s.lastIndexOf(')'));
                    String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
                    out.put(name + "/" + t.getFileName(), Long.parseLong(f[11]) + Long.parseLong(f[12]));
                } catch (IOException gone) {
                    // the thread ended meanwhile
                }
            }
        }
        return out;
    }

    /** The serving executor's threads that used the most CPU since {@code before}, so that its CPU can be read. */
    private static void printBusiestThreads(String manager, String window, long pid, Map<String, Long> before)
            throws IOException {
        Map<String, Long> after = threadTicks(pid);
        List<Map.Entry<String, Long>> deltas = new ArrayList<>();
        for (Map.Entry<String, Long> e : after.entrySet()) {
            long d = e.getValue() - before.getOrDefault(e.getKey(), 0L);
            if (d > 0) {
                deltas.add(Map.entry(e.getKey(), d));
            }
        }
        deltas.sort((a, b) -> Long.compare(b.getValue(), a.getValue()));
        StringBuilder line = new StringBuilder();
        for (int i = 0; i < Math.min(6, deltas.size()); i++) {
            line.append(' ').append(deltas.get(i).getKey().replace(' ', '_')).append('=')
                    .append(deltas.get(i).getValue() * 1000 / TICKS_PER_SECOND).append("ms");
        }
        System.out.printf(Locale.ROOT, "THREADS manager=%s serving executor, %s, busiest:%s%n", manager, window,
                line);
    }

    /** The guest's busy ticks (all but idle and iowait) and its kernel ticks (system, irq, softirq). */
    private static long[] guestCpu() throws IOException {
        String cpu = Files.readAllLines(Path.of("/proc/stat")).get(0);
        String[] f = cpu.trim().split("\\s+");
        long total = 0;
        for (int i = 1; i < f.length && i <= 8; i++) {
            total += Long.parseLong(f[i]);
        }
        long idle = Long.parseLong(f[4]) + Long.parseLong(f[5]);
        long kernel = Long.parseLong(f[3]) + Long.parseLong(f[6]) + Long.parseLong(f[7]);
        return new long[] {total - idle, kernel};
    }

    private static void checkPlacement(TaskLog tasks, String what, String serving, String receiving,
                                       boolean withMaps) {
        Set<String> mapExecutors = new TreeSet<>(tasks.mapExecutors.keySet());
        Set<String> reduceExecutors = new TreeSet<>(tasks.reduceExecutors.keySet());
        if (withMaps && !mapExecutors.equals(Set.of(serving))) {
            throw new IllegalStateException(what + ": map tasks ran on executors " + mapExecutors + ", not only " + serving);
        }
        if (!withMaps && !mapExecutors.isEmpty()) {
            throw new IllegalStateException(what + ": the map stage ran again (on " + mapExecutors + ")");
        }
        if (!reduceExecutors.equals(Set.of(receiving))) {
            throw new IllegalStateException(what + ": reduce tasks ran on executors " + reduceExecutors + ", not only "
                    + receiving);
        }
    }

    /** Where map and reduce tasks ran, and the bytes reduce tasks fetched (remote plus local). */
    static final class TaskLog extends SparkListener {
        final Map<String, Boolean> mapExecutors = new ConcurrentHashMap<>();
        final Map<String, Boolean> reduceExecutors = new ConcurrentHashMap<>();
        final AtomicLong bytesRead = new AtomicLong();

        void reset() {
            mapExecutors.clear();
            reduceExecutors.clear();
            bytesRead.set(0);
        }

        @Override
        public void onTaskEnd(SparkListenerTaskEnd end) {
            if (end.taskMetrics() == null) {
                return;
            }
            if (end.taskMetrics().shuffleWriteMetrics().recordsWritten() > 0) {
                mapExecutors.put(end.taskInfo().executorId(), true);
            }
            long read = end.taskMetrics().shuffleReadMetrics().remoteBytesRead()
                    + end.taskMetrics().shuffleReadMetrics().localBytesRead();
            if (end.taskMetrics().shuffleReadMetrics().recordsRead() > 0) {
                reduceExecutors.put(end.taskInfo().executorId(), true);
                bytesRead.addAndGet(read);
            }
        }
    }
}
