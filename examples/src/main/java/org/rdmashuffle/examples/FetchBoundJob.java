package org.rdmashuffle.examples;

import java.io.IOException;
import java.io.Serializable;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.spark.HashPartitioner;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import scala.Tuple2;
import scala.reflect.ClassTag$;

/**
 * The fetch-bound job ({@code benchmarks/fetch-bound/run.sh}): a shuffle of large incompressible
 * records whose reduce stage does nothing but fetch them and check them, so the reduce stage's time
 * and CPU are what the shuffle's fetching costs. One application, one shuffle manager, one mode:
 * <ul>
 *   <li>{@code oneway}: every map task runs on the serving executor, every reduce task on the reading
 *   executor (both pinned with preferred locations and {@code spark.locality.wait} longer than the job,
 *   then checked from the tasks' executors), so one executor only serves and the other only reads;</li>
 *   <li>{@code bothways}: maps and reduce partitions alternate between the two executors, so each
 *   serves half of what the other reads.</li>
 * </ul>
 * The map stage runs as a job of its own ({@code submitMapStage}); between it and the reduce job the
 * driver syncs the disks ({@code --cold true}: and drops the page cache, which needs root) and samples
 * each executor process's CPU time from {@code /proc}; after the reduce job it samples again.
 *
 * <p>Record {@code i} is key {@code i} and a value of {@code --record-bytes} bytes whose first word
 * is {@code i} and whose word {@code k} is {@link #word}{@code (i, k)}: a reducer checks every
 * {@code --verify-stride}-th word (1: all of them) against that, and the driver checks the count,
 * the bytes, the sum and an xor-hash of the indices that arrived against what was generated.
 *
 * <p>Options: {@code --manager sort|rdma}, {@code --mode oneway|bothways}, {@code --records N}
 * (32768: 2 GiB), {@code --record-bytes B} (65536), {@code --maps M} (32: blocks of 4 MiB, under the pool's largest buffer), {@code --partitions P} (16),
 * {@code --cold true|false}, {@code --verify-stride W} (32), {@code --warmup-records N} (4096: a
 * smaller run of the same shuffle, map and reduce, before the measured one, so that the JIT has
 * compiled both managers' reduce paths; 0: none), {@code --serve-host H} (the serving
 * executor in oneway: the one on host H; default the first by host and id), {@code --result FILE}, and
 * the common {@code --master --executors --jars --conf}. Writes one JSON line. Exit code 0: right; 3:
 * wrong records; 5: tasks not where they were pinned; 4: job failed.
 */
public final class FetchBoundJob {
    private static final VarHandle LONGS = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);

    private FetchBoundJob() {
    }

    /** Word {@code k >= 1} of record {@code i}'s value (word 0 is {@code i}). */
    static long word(long i, int k) {
        return FaultJob.mix(i * 0x9E3779B97F4A7C15L + k);
    }

    /** Record {@code i}'s value. */
    static byte[] value(long i, int recordBytes) {
        byte[] v = new byte[recordBytes];
        LONGS.set(v, 0, i);
        for (int k = 1; k < recordBytes / 8; k++) {
            LONGS.set(v, k * 8, word(i, k));
        }
        return v;
    }

    /**
     * Words of {@code v} that differ from record {@code key}'s, checking word 0, every {@code stride}-th
     * word and the last; a value of the wrong length counts as one wrong word.
     */
    static long badWords(int key, byte[] v, int recordBytes, int stride) {
        if (v.length != recordBytes) {
            return 1;
        }
        int words = recordBytes / 8;
        long bad = (long) LONGS.get(v, 0) == key ? 0 : 1;
        for (int k = stride; k < words; k += stride) {
            bad += (long) LONGS.get(v, k * 8) == word(key, k) ? 0 : 1;
        }
        if (words > 1 && (words - 1) % stride != 0) {
            bad += (long) LONGS.get(v, (words - 1) * 8) == word(key, words - 1) ? 0 : 1;
        }
        return bad;
    }

    /** What arrived: records, value bytes, sum of indices, xor of {@code mix(index)}, wrong words. */
    record Digest(long records, long bytes, long indexSum, long indexXor, long badWords) implements Serializable {
        private static final long serialVersionUID = 1L;
        static final Digest EMPTY = new Digest(0, 0, 0, 0, 0);

        Digest plus(Digest o) {
            return new Digest(records + o.records, bytes + o.bytes, indexSum + o.indexSum, indexXor ^ o.indexXor,
                    badWords + o.badWords);
        }

        Digest plusRecord(int key, long valueBytes, long bad) {
            return new Digest(records + 1, bytes + valueBytes, indexSum + key, indexXor ^ FaultJob.mix(key),
                    badWords + bad);
        }

        /** What {@code records} correct records of {@code recordBytes} each give. */
        static Digest expected(long records, int recordBytes) {
            long xor = 0;
            for (long i = 0; i < records; i++) {
                xor ^= FaultJob.mix(i);
            }
            return new Digest(records, records * recordBytes, records * (records - 1) / 2, xor, 0);
        }

        /** As a {@code long[]} (Kryo, which task results go through here, cannot build records). */
        long[] toArray() {
            return new long[] {records, bytes, indexSum, indexXor, badWords};
        }

        static Digest of(long[] a) {
            return new Digest(a[0], a[1], a[2], a[3], a[4]);
        }

        String hex() {
            return String.format(Locale.ROOT, "%d/%d/%016x/%016x/%d", records, bytes, indexSum, indexXor, badWords);
        }
    }

    /** Records {@code [from, to)}, generated as they are consumed. */
    static Iterator<Tuple2<Integer, byte[]>> records(long from, long to, int recordBytes) {
        return new Iterator<>() {
            long next = from;

            @Override
            public boolean hasNext() {
                return next < to;
            }

            @Override
            public Tuple2<Integer, byte[]> next() {
                if (next >= to) {
                    throw new NoSuchElementException();
                }
                long i = next++;
                return new Tuple2<>((int) i, value(i, recordBytes));
            }
        };
    }

    /** First record of map {@code m} of {@code maps} (map {@code maps} gives the end). */
    static long firstRecord(long records, int maps, int m) {
        return records * m / maps;
    }

    /**
     * Which executor of {@code executors} (index) runs task {@code task}: in oneway every map on
     * {@code serving} and every reduce on the other one; in bothways they alternate.
     */
    static int placement(boolean oneway, boolean map, int task, int serving) {
        if (oneway) {
            return map ? serving : 1 - serving;
        }
        return task % 2;
    }

    /** One executor: id and host. */
    record Executor(String id, String host) implements Serializable, Comparable<Executor> {
        private static final long serialVersionUID = 1L;

        @Override
        public int compareTo(Executor o) {
            int c = host.compareTo(o.host);
            return c != 0 ? c : id.compareTo(o.id);
        }
    }

    /** The application's executors, found by running tiny tasks until {@code wanted} have answered. */
    static List<Executor> executors(JavaSparkContext sc, int wanted) {
        Set<Executor> seen = new TreeSet<>();
        List<Integer> probes = new ArrayList<>();
        for (int i = 0; i < 64; i++) {
            probes.add(i);
        }
        for (int attempt = 0; attempt < 20 && seen.size() < wanted; attempt++) {
            seen.addAll(sc.parallelize(probes, probes.size()).map(x -> {
                Thread.sleep(20);
                SparkEnv env = SparkEnv.get();
                return env.blockManager().blockManagerId().host() + "\t" + env.executorId();
            }).distinct().collect().stream().map(s -> new Executor(s.split("\t")[1], s.split("\t")[0])).toList());
        }
        if (seen.size() != wanted) {
            throw new IllegalStateException("wanted " + wanted + " executors, found " + seen);
        }
        return new ArrayList<>(seen);
    }

    public static void main(String[] args) throws Exception {
        Cluster.Options o = Cluster.Options.parse(args, 1, "local-cluster[2,1,1024]",
                Set.of("--manager", "--mode", "--records", "--record-bytes", "--maps", "--partitions", "--cold",
                        "--verify-stride", "--serve-host", "--result", "--profiler", "--profile-dir", "--warmup-records"));
        boolean rdma = switch (o.get("--manager", "rdma")) {
            case "rdma" -> true;
            case "sort" -> false;
            default -> throw new IllegalArgumentException("--manager takes sort or rdma");
        };
        String mode = o.get("--mode", "oneway");
        if (!mode.equals("oneway") && !mode.equals("bothways")) {
            throw new IllegalArgumentException("--mode takes oneway or bothways");
        }
        boolean oneway = mode.equals("oneway");
        long records = Long.parseLong(o.get("--records", "32768"));
        int recordBytes = Integer.parseInt(o.get("--record-bytes", "65536"));
        int maps = Integer.parseInt(o.get("--maps", "32"));
        int partitions = Integer.parseInt(o.get("--partitions", "16"));
        boolean cold = Boolean.parseBoolean(o.get("--cold", "false"));
        int stride = Integer.parseInt(o.get("--verify-stride", "32"));
        String serveHost = o.get("--serve-host", "");
        Path result = Path.of(o.get("--result", "fetch-bound-result.json"));
        long warmupRecords = Long.parseLong(o.get("--warmup-records", "4096"));
        String profiler = o.get("--profiler", "");
        Path profileDir = Path.of(o.get("--profile-dir", "."));
        if (records <= 0 || records > Integer.MAX_VALUE || recordBytes < 16 || recordBytes % 8 != 0 || maps <= 0
                || partitions <= 0 || stride <= 0) {
            throw new IllegalArgumentException("--records 1..2^31-1, --record-bytes a multiple of 8 from 16, --maps,"
                    + " --partitions and --verify-stride positive");
        }
        Digest expected = Digest.expected(records, recordBytes);

        SparkConf conf = Cluster.configure(new SparkConf().setMaster(o.master)
                .setAppName("rdma-shuffle-fetch-bound-" + mode + "-" + (rdma ? "rdma" : "sort"))
                .set("spark.shuffle.compress", "false")
                .set("spark.locality.wait", "1h")
                .set("spark.serializer", "org.apache.spark.serializer.KryoSerializer"), rdma, o.jars, o.conf);
        PhaseRecorder recorder = new PhaseRecorder();
        String outcome;
        Digest got = Digest.EMPTY;
        StringBuilder json = new StringBuilder();
        long ticksPerSecond = ProcCpu.ticksPerSecond();
        try (JavaSparkContext sc = new JavaSparkContext(conf)) {
            sc.sc().addSparkListener(recorder);
            Cluster.waitForExecutors(sc.sc(), o.master, 2);
            List<Executor> execs = executors(sc, 2);
            int serving = 0;
            if (!serveHost.isEmpty()) {
                serving = execs.get(1).host().equals(serveHost) ? 1 : 0;
                if (!execs.get(serving).host().equals(serveHost)) {
                    throw new IllegalArgumentException("no executor on --serve-host " + serveHost + ": " + execs);
                }
            }
            String[] mapAt = new String[maps];
            String[] mapExec = new String[maps];
            for (int m = 0; m < maps; m++) {
                Executor e = execs.get(placement(oneway, true, m, serving));
                mapAt[m] = PinnedRDD.executorLocation(e.host(), e.id());
                mapExec[m] = e.id();
            }
            String[] reduceAt = new String[partitions];
            String[] reduceExec = new String[partitions];
            for (int p = 0; p < partitions; p++) {
                Executor e = execs.get(placement(oneway, false, p, serving));
                reduceAt[p] = PinnedRDD.executorLocation(e.host(), e.id());
                reduceExec[p] = e.id();
            }
            Map<String, Long> pids = ProcCpu.executorPids(sc.sc().applicationId());

            List<Integer> mapIds = new ArrayList<>();
            for (int m = 0; m < maps; m++) {
                mapIds.add(m);
            }
            if (warmupRecords > 0) {
                // The same shuffle, smaller and in full, so that neither manager's reduce path runs
                // interpreted in the measured stage (a cold JIT cost more than the fetching itself).
                sc.setLocalProperty(PhaseRecorder.PHASE, "warmup");
                Digest w = reduce(shuffle(sc, mapIds, mapAt, warmupRecords, recordBytes, partitions), reduceAt,
                        recordBytes, partitions, stride);
                if (!w.equals(Digest.expected(warmupRecords, recordBytes))) {
                    throw new IllegalStateException("warm-up shuffle wrong: " + w.hex());
                }
            }
            JavaPairRDD<Integer, byte[]> shuffled = shuffle(sc, mapIds, mapAt, records, recordBytes, partitions);
            long t0 = System.currentTimeMillis();
            sc.setLocalProperty(PhaseRecorder.PHASE, "map");
            sc.sc().submitMapStage((ShuffleDependency<?, ?, ?>) shuffled.rdd().dependencies().head()).get();
            long mapWallMs = System.currentTimeMillis() - t0;

            long syncMs = System.currentTimeMillis();
            run("sync");
            long cachedBefore = meminfoKb("Cached");
            if (cold) {
                Files.writeString(Path.of("/proc/sys/vm/drop_caches"), "3\n");
            }
            long cachedAfter = meminfoKb("Cached");
            syncMs = System.currentTimeMillis() - syncMs;

            Map<String, ProcCpu.Sample> before = new TreeMap<>();
            for (Map.Entry<String, Long> e : pids.entrySet()) {
                before.put(e.getKey(), ProcCpu.sample(e.getValue()));
            }
            if (!profiler.isEmpty()) {
                for (Map.Entry<String, Long> e : pids.entrySet()) {
                    attach(e.getValue(), profiler, "start,event=cpu,interval=1ms,cstack=vm,threads");
                }
            }
            sc.setLocalProperty(PhaseRecorder.PHASE, "reduce");
            long r0 = System.currentTimeMillis();
            try {
                got = reduce(shuffled, reduceAt, recordBytes, partitions, stride);
                outcome = got.equals(expected) ? "correct" : "wrong";
            } catch (Exception e) {
                outcome = "failed";
                System.err.println("job failed: " + e);
            }
            long r1 = System.currentTimeMillis();
            Map<String, ProcCpu.Sample> spent = new TreeMap<>();
            for (Map.Entry<String, Long> e : pids.entrySet()) {
                spent.put(e.getKey(), ProcCpu.sample(e.getValue()).minus(before.get(e.getKey())));
            }
            if (!profiler.isEmpty()) {
                Files.createDirectories(profileDir);
                for (Map.Entry<String, Long> e : pids.entrySet()) {
                    Path out = profileDir.toAbsolutePath().resolve("profile-" + mode + "-" + (rdma ? "rdma" : "sort")
                            + "-exec" + e.getKey() + ".collapsed");
                    attach(e.getValue(), profiler, "stop,collapsed,threads,file=" + out);
                }
            }

            String misplaced = misplaced(recorder, mapExec, reduceExec);
            if (outcome.equals("correct") && !misplaced.isEmpty()) {
                outcome = "misplaced";
            }
            List<PhaseRecorder.Task> reduce = recorder.tasks("reduce");
            long remote = reduce.stream().mapToLong(PhaseRecorder.Task::remoteBytes).sum();
            long local = reduce.stream().mapToLong(PhaseRecorder.Task::localBytes).sum();
            json.append(String.format(Locale.ROOT,
                    "{\"manager\":\"%s\",\"mode\":\"%s\",\"cold\":%b,\"outcome\":\"%s\",\"misplaced\":\"%s\","
                            + "\"records\":%d,\"recordBytes\":%d,\"maps\":%d,\"partitions\":%d,"
                            + "\"mapJobMs\":%d,\"mapStageMs\":%d,\"syncMs\":%d,\"cachedKbBefore\":%d,\"cachedKbAfter\":%d,"
                            + "\"reduceJobMs\":%d,\"reduceStageMs\":%d,\"reduceStartEpochMs\":%d,\"reduceEndEpochMs\":%d,"
                            + "\"stageRetries\":%d,\"remoteBytes\":%d,\"localBytes\":%d,\"remoteBlocks\":%d,"
                            + "\"fetchWaitMs\":%d,\"reduceTaskRunMs\":%d,\"reduceTaskCpuMs\":%d,\"ticksPerSecond\":%d,"
                            + "\"servingExecutor\":\"%s\",\"readingExecutor\":\"%s\",\"expected\":\"%s\",\"got\":\"%s\","
                            + "\"executors\":{",
                    rdma ? "rdma" : "sort", mode, cold, outcome, misplaced, records, recordBytes, maps, partitions,
                    mapWallMs, recorder.stageMs("map"), syncMs, cachedBefore, cachedAfter, r1 - r0,
                    recorder.stageMs("reduce"), r0, r1, recorder.retries("map") + recorder.retries("reduce"), remote,
                    local, reduce.stream().mapToLong(PhaseRecorder.Task::remoteBlocks).sum(),
                    reduce.stream().mapToLong(PhaseRecorder.Task::fetchWaitMs).sum(),
                    reduce.stream().mapToLong(PhaseRecorder.Task::runMs).sum(),
                    reduce.stream().mapToLong(PhaseRecorder.Task::cpuMs).sum(), ticksPerSecond,
                    oneway ? execs.get(serving).id() : "", oneway ? execs.get(1 - serving).id() : "",
                    expected.hex(), got.hex()));
            String sep = "";
            for (Executor e : execs) {
                ProcCpu.Sample s = spent.get(e.id());
                json.append(sep).append(String.format(Locale.ROOT,
                        "\"%s\":{\"host\":\"%s\",\"pid\":%d,\"receivedBytes\":%d,\"cpuTicks\":%d,\"threads\":{",
                        e.id(), e.host(), pids.getOrDefault(e.id(), -1L),
                        reduce.stream().filter(t -> t.executorId().equals(e.id()))
                                .mapToLong(PhaseRecorder.Task::remoteBytes).sum(), s == null ? -1 : s.ticks()));
                if (s != null) {
                    String tsep = "";
                    for (Map.Entry<String, Long> g : s.threadTicks().entrySet()) {
                        if (g.getValue() > 0) {
                            json.append(tsep).append('"').append(g.getKey().replace("\"", "'")).append("\":")
                                    .append(g.getValue());
                            tsep = ",";
                        }
                    }
                }
                json.append("}}");
                sep = ",";
            }
            json.append("}}\n");
        }
        try {
            Files.writeString(result, json, StandardCharsets.UTF_8);
        } catch (IOException e) {
            System.err.println("cannot write " + result + ": " + e);
        }
        System.out.print(json);
        System.exit(switch (outcome) {
            case "correct" -> 0;
            case "wrong" -> 3;
            case "misplaced" -> 5;
            default -> 4;
        });
    }

    /** The map side: {@code records} records from tasks pinned at {@code mapAt}, partitioned by key. */
    private static JavaPairRDD<Integer, byte[]> shuffle(JavaSparkContext sc, List<Integer> mapIds, String[] mapAt,
                                                        long records, int recordBytes, int partitions) {
        int maps = mapIds.size();
        JavaRDD<Integer> mapTasks = new JavaRDD<>(new PinnedRDD<>(sc.parallelize(mapIds, maps).rdd(), mapAt),
                ClassTag$.MODULE$.apply(Integer.class));
        return mapTasks.flatMapToPair(
                m -> records(firstRecord(records, maps, m), firstRecord(records, maps, m + 1), recordBytes))
                .partitionBy(new HashPartitioner(partitions));
    }

    /** The reduce side: tasks pinned at {@code reduceAt} check every record and return what arrived. */
    private static Digest reduce(JavaPairRDD<Integer, byte[]> shuffled, String[] reduceAt, int recordBytes,
                                 int partitions, int stride) {
        JavaRDD<Tuple2<Integer, byte[]>> pinned = new JavaRDD<>(new PinnedRDD<>(shuffled.rdd(), reduceAt),
                shuffled.rdd().elementClassTag());
        return pinned.mapPartitionsWithIndex((p, it) -> {
            Digest d = Digest.EMPTY;
            while (it.hasNext()) {
                Tuple2<Integer, byte[]> r = it.next();
                long bad = badWords(r._1(), r._2(), recordBytes, stride)
                        + (Math.floorMod(r._1(), partitions) == p ? 0 : 1);
                d = d.plusRecord(r._1(), r._2().length, bad);
            }
            return List.of(d.toArray()).iterator();
        }, true).collect().stream().map(Digest::of).reduce(Digest.EMPTY, Digest::plus);
    }

    /** Tasks that ran elsewhere than pinned, as "phase:index@executor" (empty when all ran where pinned). */
    static String misplaced(PhaseRecorder recorder, String[] mapExec, String[] reduceExec) {
        List<String> wrong = new ArrayList<>();
        for (PhaseRecorder.Task t : recorder.tasks) {
            boolean map = t.phase().equals("map") || t.phase().equals("warmup") && t.remoteBytes() + t.localBytes() == 0;
            boolean reduce = t.phase().equals("reduce") || t.phase().equals("warmup") && !map;
            String[] want = map ? mapExec : reduce ? reduceExec : null;
            if (want != null && t.successful() && !want[t.index()].equals(t.executorId())) {
                wrong.add(t.phase() + ":" + t.index() + "@" + t.executorId());
            }
        }
        return String.join(" ", wrong);
    }

    /**
     * Loads async-profiler ({@code --profiler}: the path of {@code libasyncProfiler.so}) into process
     * {@code pid} with {@code command} (the profiler's agent arguments) through the JDK's attach API.
     */
    private static void attach(long pid, String agentPath, String command) throws Exception {
        com.sun.tools.attach.VirtualMachine vm = com.sun.tools.attach.VirtualMachine.attach(Long.toString(pid));
        try {
            vm.loadAgentPath(agentPath, command);
        } finally {
            vm.detach();
        }
    }

    private static long meminfoKb(String field) {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/meminfo"))) {
                if (line.startsWith(field + ":")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", ""));
                }
            }
        } catch (IOException | NumberFormatException e) {
            return -1;
        }
        return -1;
    }

    private static void run(String... command) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(command).inheritIO().start();
        if (p.waitFor() != 0) {
            throw new IOException(String.join(" ", command) + " exited with " + p.exitValue());
        }
    }
}
