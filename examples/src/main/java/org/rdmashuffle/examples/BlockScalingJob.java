package org.rdmashuffle.examples;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.spark.HashPartitioner;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import scala.Tuple2;

/**
 * The scaling benchmark's job ({@code benchmarks/scaling/run.sh}): for each size M × R, a shuffle in
 * which every one of M map tasks writes exactly one tiny record (key r, a long) to every one of R
 * reduce partitions, so the reduce stage fetches M × R non-empty blocks of a few bytes each and does
 * nothing else: its time and CPU are the per-block cost of the shuffle. One application, one shuffle
 * manager, sizes in the order given, after a warm-up shuffle. The map stage runs as a job of its own;
 * executor processes' CPU ({@code /proc}) is sampled around the reduce job alone.
 *
 * <p>Options: {@code --manager sort|rdma}, {@code --sizes 10x10,100x100,300x300,1000x1000},
 * {@code --warmup MxR} (50x50; "0x0": none), {@code --result FILE} (JSON lines, appended), and the common
 * {@code --master --executors --jars --conf}. Exit code 0 when every shuffle was right, 3 otherwise.
 */
public final class BlockScalingJob {
    private BlockScalingJob() {
    }

    /** Maps × reducers, parsed from "MxR". */
    record Size(int maps, int reducers) implements java.io.Serializable {
        static Size parse(String s) {
            String[] p = s.trim().toLowerCase(Locale.ROOT).split("x");
            if (p.length != 2) {
                throw new IllegalArgumentException("a size is MxR (e.g. 100x100), not " + s);
            }
            Size z = new Size(Integer.parseInt(p[0]), Integer.parseInt(p[1]));
            if (z.maps < 0 || z.reducers < 0 || (z.maps == 0) != (z.reducers == 0)) {
                throw new IllegalArgumentException("a size has positive maps and reducers (or is 0x0), not " + s);
            }
            return z;
        }

        /** Non-empty blocks the reduce stage fetches: every map writes to every reducer. */
        long blocks() {
            return (long) maps * reducers;
        }

        /** Value of map {@code m}'s record for reducer {@code r}: unique, 0 .. blocks - 1. */
        long value(int m, int r) {
            return (long) m * reducers + r;
        }

        /** What the reduce stage must see: {count, sum of values}. */
        long[] expected() {
            long n = blocks();
            return new long[] {n, n * (n - 1) / 2};
        }

        @Override
        public String toString() {
            return maps + "x" + reducers;
        }
    }

    /** Map {@code m}'s records: one per reducer. */
    static List<Tuple2<Integer, Long>> mapOutput(Size z, int m) {
        List<Tuple2<Integer, Long>> out = new ArrayList<>(z.reducers());
        for (int r = 0; r < z.reducers(); r++) {
            out.add(new Tuple2<>(r, z.value(m, r)));
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        Cluster.Options o = Cluster.Options.parse(args, 1, "local-cluster[2,1,1024]",
                Set.of("--manager", "--sizes", "--warmup", "--result"));
        boolean rdma = switch (o.get("--manager", "rdma")) {
            case "rdma" -> true;
            case "sort" -> false;
            default -> throw new IllegalArgumentException("--manager takes sort or rdma");
        };
        List<Size> sizes = new ArrayList<>();
        for (String s : o.get("--sizes", "10x10,100x100,300x300,1000x1000").split(",")) {
            sizes.add(Size.parse(s));
        }
        Size warmup = Size.parse(o.get("--warmup", "50x50"));
        Path result = Path.of(o.get("--result", "scaling-results.jsonl"));
        SparkConf conf = Cluster.configure(new SparkConf().setMaster(o.master)
                .setAppName("rdma-shuffle-scaling-" + (rdma ? "rdma" : "sort")), rdma, o.jars, o.conf);
        PhaseRecorder recorder = new PhaseRecorder();
        long ticksPerSecond = ProcCpu.ticksPerSecond();
        int wrong = 0;
        try (JavaSparkContext sc = new JavaSparkContext(conf)) {
            sc.sc().addSparkListener(recorder);
            Cluster.waitForExecutors(sc.sc(), o.master, o.executors);
            Map<String, Long> pids = ProcCpu.executorPids(sc.sc().applicationId());
            if (warmup.blocks() > 0 && !run(sc, warmup, "warmup", recorder, pids, ticksPerSecond, rdma).correct) {
                wrong++;
            }
            for (int i = 0; i < sizes.size(); i++) {
                Outcome out = run(sc, sizes.get(i), "size" + i, recorder, pids, ticksPerSecond, rdma);
                wrong += out.correct ? 0 : 1;
                Files.writeString(result, out.json, StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                        StandardOpenOption.APPEND);
                System.out.print(out.json);
            }
        }
        System.exit(wrong == 0 ? 0 : 3);
    }

    private record Outcome(boolean correct, String json) {
    }

    private static Outcome run(JavaSparkContext sc, Size z, String phase, PhaseRecorder recorder,
                               Map<String, Long> pids, long ticksPerSecond, boolean rdma) throws Exception {
        List<Integer> mapIds = new ArrayList<>();
        for (int m = 0; m < z.maps(); m++) {
            mapIds.add(m);
        }
        JavaPairRDD<Integer, Long> shuffled = sc.parallelize(mapIds, z.maps())
                .flatMapToPair(m -> mapOutput(z, m).iterator())
                .partitionBy(new HashPartitioner(z.reducers()));
        sc.setLocalProperty(PhaseRecorder.PHASE, phase + "-map");
        long t0 = System.currentTimeMillis();
        sc.sc().submitMapStage((ShuffleDependency<?, ?, ?>) shuffled.rdd().dependencies().head()).get();
        long mapMs = System.currentTimeMillis() - t0;
        Map<String, ProcCpu.Sample> before = new TreeMap<>();
        for (Map.Entry<String, Long> e : pids.entrySet()) {
            before.put(e.getKey(), ProcCpu.sample(e.getValue()));
        }
        sc.setLocalProperty(PhaseRecorder.PHASE, phase);
        long r0 = System.currentTimeMillis();
        List<long[]> parts = shuffled.mapPartitions(it -> {
            long n = 0;
            long sum = 0;
            while (it.hasNext()) {
                n++;
                sum += it.next()._2();
            }
            return List.of(new long[] {n, sum}).iterator();
        }).collect();
        long r1 = System.currentTimeMillis();
        long cpuTicks = 0;
        long transportTicks = 0;
        for (Map.Entry<String, Long> e : pids.entrySet()) {
            ProcCpu.Sample d = ProcCpu.sample(e.getValue()).minus(before.get(e.getKey()));
            cpuTicks += d.ticks();
            for (Map.Entry<String, Long> g : d.threadTicks().entrySet()) {
                if (g.getKey().startsWith("rdma-tcp") || g.getKey().startsWith("shuffle-")) {
                    transportTicks += g.getValue();
                }
            }
        }
        long n = 0;
        long sum = 0;
        for (long[] p : parts) {
            n += p[0];
            sum += p[1];
        }
        long[] want = z.expected();
        boolean correct = n == want[0] && sum == want[1];
        List<PhaseRecorder.Task> tasks = recorder.tasks(phase);
        String json = String.format(Locale.ROOT,
                "{\"manager\":\"%s\",\"size\":\"%s\",\"maps\":%d,\"reducers\":%d,\"blocks\":%d,\"correct\":%b,"
                        + "\"records\":%d,\"mapJobMs\":%d,\"reduceJobMs\":%d,\"reduceStageMs\":%d,\"executorCpuMs\":%d,"
                        + "\"transportThreadCpuMs\":%d,\"taskCpuMs\":%d,\"taskRunMs\":%d,\"remoteBlocks\":%d,"
                        + "\"localBlocks\":%d,\"fetchWaitMs\":%d,\"executors\":%d}%n",
                rdma ? "rdma" : "sort", z, z.maps(), z.reducers(), z.blocks(), correct, n, mapMs, r1 - r0,
                recorder.stageMs(phase), cpuTicks * 1000 / ticksPerSecond, transportTicks * 1000 / ticksPerSecond,
                tasks.stream().mapToLong(PhaseRecorder.Task::cpuMs).sum(),
                tasks.stream().mapToLong(PhaseRecorder.Task::runMs).sum(),
                tasks.stream().mapToLong(PhaseRecorder.Task::remoteBlocks).sum(),
                tasks.stream().mapToLong(PhaseRecorder.Task::localBlocks).sum(),
                tasks.stream().mapToLong(PhaseRecorder.Task::fetchWaitMs).sum(), pids.size());
        return new Outcome(correct, json);
    }
}
