package org.rdmashuffle.examples;

import java.io.File;
import java.io.IOException;
import java.io.Serializable;
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
import java.util.stream.IntStream;
import org.apache.spark.HashPartitioner;
import org.apache.spark.MapOutputTrackerMaster;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.rdmashuffle.shuffle.core.diagnostics.ProcessResources;
import org.rdmashuffle.shuffle.RdmaShuffleManager;
import scala.Tuple2;

/**
 * The soak: what stays behind after cleanup, over many shuffles or many applications, for one shuffle
 * manager. {@code --mode shuffles}: one application runs {@code --count} shuffles (200), each checked
 * by digest and then cleaned by Spark's {@code ContextCleaner} (the RDD is dropped and collected;
 * nothing calls a cleanup by hand); after each cleanup every executor reports its registered output
 * bytes, output tables, shuffle files, mappings of them, open descriptors, threads and direct memory.
 * {@code --mode apps}: {@code --count} applications (50) in a row in this JVM, each running and
 * cleaning one such shuffle before it stops; after each stop the driver reports its descriptors,
 * threads and direct memory, and the run counts the {@code blockmgr-*} and {@code spark-*}
 * directories left in the local directories. Writes one CSV row per sample to {@code --out}/soak-MODE-MANAGER.csv and prints a summary.
 *
 * <p>Options: {@code --manager sort|rdma}, {@code --mode shuffles|apps}, {@code --count N},
 * {@code --records N} (100,000 per shuffle), and the common {@code --master --executors --jars --out --conf}.
 * Exit code 0 when every shuffle was right, 3 otherwise.
 */
public final class SoakJob {
    /**
     * Spark's executor pool for block and shuffle removal: a new thread per removal until it has 100,
     * each ending after 60 s idle; it grows with cleanups under any shuffle manager, so it is reported
     * apart from the other threads.
     */
    static final String SPARK_STORAGE_POOL = "block-manager-storage-async-thread-pool-#";

    private SoakJob() {
    }

    /** One executor's report. */
    record Probe(String executorId, long registeredOutputBytes, int tables, long registeredBytes, int shuffleFiles,
                 long readsCompleted, long sparkPathFallbacks, ProcessResources resources) implements Serializable {
        private static final long serialVersionUID = 1L;

        static Probe take() {
            SparkEnv env = SparkEnv.get();
            int files = 0;
            for (File dir : env.blockManager().diskBlockManager().localDirs()) {
                files += countShuffleFiles(dir);
            }
            long outputs = 0;
            int tables = 0;
            long registered = 0;
            long reads = 0;
            long fallbacks = 0;
            if (env.shuffleManager() instanceof RdmaShuffleManager m && m.executorStats().isPresent()) {
                RdmaShuffleManager.ExecutorStats s = m.executorStats().get();
                outputs = s.registeredOutputBytes();
                tables = s.shuffles().size();
                registered = s.node().registeredBytes();
                reads = s.node().readsCompleted();
                fallbacks = s.unregisteredOutputs() + s.receiveMemoryFallbacks();
            }
            return new Probe(env.executorId(), outputs, tables, registered, files, reads, fallbacks,
                    ProcessResources.sample());
        }

        private static int countShuffleFiles(File f) {
            File[] children = f.listFiles();
            if (children == null) {
                return f.getName().startsWith("shuffle_") ? 1 : 0;
            }
            int n = 0;
            for (File c : children) {
                n += countShuffleFiles(c);
            }
            return n;
        }

        /** Threads outside Spark's storage pool. */
        int otherThreads() {
            return resources.threads() - resources.threadsIn(SPARK_STORAGE_POOL);
        }
    }

    public static void main(String[] args) throws Exception {
        Cluster.Options o = Cluster.Options.parse(args, 1, "local-cluster[2,1,1024]",
                Set.of("--manager", "--mode", "--count", "--records"));
        boolean rdma = switch (o.get("--manager", "rdma")) {
            case "rdma" -> true;
            case "sort" -> false;
            default -> throw new IllegalArgumentException("--manager takes sort or rdma");
        };
        String mode = o.get("--mode", "shuffles");
        if (!mode.equals("shuffles") && !mode.equals("apps")) {
            throw new IllegalArgumentException("--mode takes shuffles or apps");
        }
        int count = Integer.parseInt(o.get("--count", mode.equals("apps") ? "50" : "200"));
        long records = Long.parseLong(o.get("--records", "100000"));
        if (count <= 0 || records <= 0) {
            throw new IllegalArgumentException("--count and --records must be positive");
        }
        FaultJob.Digest expected = new FaultJob.Digest(0, 0, 0);
        for (long i = 0; i < records; i++) {
            long h = FaultJob.hash(FaultJob.key(i), FaultJob.value(i));
            expected = expected.plus(new FaultJob.Digest(1, h, h));
        }
        Files.createDirectories(o.out);
        Path csv = o.out.resolve("soak-" + mode + "-" + (rdma ? "rdma" : "sort") + ".csv");
        List<String> rows = new ArrayList<>();
        int wrong = 0;
        if (mode.equals("shuffles")) {
            rows.add("shuffle,executor,registeredOutputBytes,tables,registeredBytes,shuffleFiles,shuffleMappings,"
                    + "openFds,threads,otherThreads,directBytes,jobMs,readsCompleted,sparkPathFallbacks");
            Files.write(csv, rows, StandardCharsets.UTF_8);
            try (JavaSparkContext sc = context(o, rdma, "shuffles")) {
                for (int i = 0; i < count; i++) {
                    long t0 = System.currentTimeMillis();
                    Tuple2<Integer, Boolean> r = shuffleOnce(sc, records, expected);
                    long ms = System.currentTimeMillis() - t0;
                    wrong += r._2() ? 0 : 1;
                    awaitCleaned(sc, r._1());
                    for (Probe p : awaitExecutorsClean(sc, o).values()) {
                        append(csv, rows, String.format(Locale.ROOT, "%d,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", i + 1,
                                p.executorId(), p.registeredOutputBytes(), p.tables(), p.registeredBytes(),
                                p.shuffleFiles(), p.resources().shuffleMappings(), p.resources().openFds(),
                                p.resources().threads(), p.otherThreads(), p.resources().directBytes(), ms,
                                p.readsCompleted(), p.sparkPathFallbacks()));
                    }
                    progress(i + 1, count, rows);
                }
            }
        } else {
            rows.add("app,executorsRegisteredOutputBytes,executorsShuffleFiles,driverOpenFds,driverThreads,"
                    + "driverDirectBytes,localDirsLeft,appMs,executorsReads,executorsSparkPathFallbacks");
            Files.write(csv, rows, StandardCharsets.UTF_8);
            for (int i = 0; i < count; i++) {
                long t0 = System.currentTimeMillis();
                long outputs = 0;
                int files = 0;
                long reads = 0;
                long fallbacks = 0;
                try (JavaSparkContext sc = context(o, rdma, "apps-" + (i + 1))) {
                    Tuple2<Integer, Boolean> r = shuffleOnce(sc, records, expected);
                    wrong += r._2() ? 0 : 1;
                    awaitCleaned(sc, r._1());
                    for (Probe p : awaitExecutorsClean(sc, o).values()) {
                        outputs += p.registeredOutputBytes();
                        files += p.shuffleFiles();
                        reads += p.readsCompleted();
                        fallbacks += p.sparkPathFallbacks();
                    }
                }
                long ms = System.currentTimeMillis() - t0;
                System.gc();
                ProcessResources driver = ProcessResources.sample();
                append(csv, rows, String.format(Locale.ROOT, "%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", i + 1, outputs, files,
                        driver.openFds(), driver.threads(), driver.directBytes(), localDirsLeft(), ms, reads,
                        fallbacks));
                progress(i + 1, count, rows);
            }
        }
        System.out.println("soak " + mode + " " + (rdma ? "rdma" : "sort") + ": " + count + " "
                + mode + ", " + wrong + " wrong; rows in " + csv);
        System.exit(wrong == 0 ? 0 : 3);
    }

    /** Adds a row and writes it at once, so that a run cut short keeps what it measured. */
    private static void append(Path csv, List<String> rows, String row) throws IOException {
        rows.add(row);
        Files.writeString(csv, row + System.lineSeparator(), StandardCharsets.UTF_8, StandardOpenOption.APPEND);
    }

    private static void progress(int done, int count, List<String> rows) {
        if (done == 1 || done % 10 == 0 || done == count) {
            System.out.println("[soak] " + done + "/" + count + ": " + rows.get(rows.size() - 1));
        }
    }

    private static JavaSparkContext context(Cluster.Options o, boolean rdma, String name) {
        SparkConf conf = Cluster.configure(new SparkConf().setMaster(o.master)
                .setAppName("rdma-shuffle-soak-" + name + "-" + (rdma ? "rdma" : "sort"))
                .set("spark.ui.enabled", "false")
                .set("spark.cleaner.referenceTracking.blocking", "true")
                .set("spark.cleaner.referenceTracking.blocking.shuffle", "true"), rdma, o.jars, o.conf);
        JavaSparkContext sc = new JavaSparkContext(conf);
        Cluster.waitForExecutors(sc.sc(), o.master, o.executors);
        return sc;
    }

    /** One shuffle of {@code records} checked by digest: (its shuffle id, whether it was right); the RDD is dropped. */
    private static Tuple2<Integer, Boolean> shuffleOnce(JavaSparkContext sc, long records, FaultJob.Digest expected) {
        int maps = 6;
        long perMap = (records + maps - 1) / maps;
        JavaPairRDD<Integer, byte[]> moved = sc.parallelize(List.of(0, 1, 2, 3, 4, 5), maps).flatMapToPair(m -> {
            List<Tuple2<Integer, byte[]>> out = new ArrayList<>();
            for (long i = m * perMap; i < Math.min(records, (m + 1) * perMap); i++) {
                out.add(new Tuple2<>(FaultJob.key(i), FaultJob.value(i)));
            }
            return out.iterator();
        }).partitionBy(new HashPartitioner(8));
        FaultJob.Digest got = moved.mapPartitions(it -> {
            FaultJob.Digest d = new FaultJob.Digest(0, 0, 0);
            while (it.hasNext()) {
                Tuple2<Integer, byte[]> r = it.next();
                long h = FaultJob.hash(r._1(), r._2());
                d = d.plus(new FaultJob.Digest(1, h, h));
            }
            return List.of(d).iterator();
        }).reduce(FaultJob.Digest::plus);
        int shuffleId = ((ShuffleDependency<?, ?, ?>) moved.rdd().dependencies().head()).shuffleId();
        if (!got.equals(expected)) {
            System.err.println("shuffle " + shuffleId + " wrong: expected " + expected + ", got " + got);
        }
        return new Tuple2<>(shuffleId, got.equals(expected));
    }

    /** Collects garbage on the driver until Spark's cleaner has taken the shuffle off its tracker. */
    private static void awaitCleaned(JavaSparkContext sc, int shuffleId) throws InterruptedException {
        MapOutputTrackerMaster tracker = (MapOutputTrackerMaster) sc.sc().env().mapOutputTracker();
        long deadline = System.nanoTime() + 120_000_000_000L;
        while (tracker.containsShuffle(shuffleId)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("ContextCleaner did not clean shuffle " + shuffleId + " in 120 s");
            }
            System.gc();
            Thread.sleep(100);
        }
    }

    /** Every executor's probe once none holds a table or shuffle file any more (or after 60 s, as they are). */
    private static Map<String, Probe> awaitExecutorsClean(JavaSparkContext sc, Cluster.Options o)
            throws InterruptedException {
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (true) {
            Map<String, Probe> probes = probe(sc, o);
            boolean clean = probes.values().stream().allMatch(p -> p.tables() == 0 && p.shuffleFiles() == 0
                    && p.registeredOutputBytes() == 0 && p.resources().shuffleMappings() <= 0);
            if (clean || System.nanoTime() > deadline) {
                return probes;
            }
            Thread.sleep(200);
        }
    }

    private static Map<String, Probe> probe(JavaSparkContext sc, Cluster.Options o) {
        int executors = sc.sc().getExecutorMemoryStatus().size() - 1;
        Map<String, Probe> byExecutor = new TreeMap<>();
        for (int round = 0; round < 20 && byExecutor.size() < executors; round++) {
            List<Integer> slots = IntStream.range(0, 8 * executors).boxed().toList();
            for (Probe p : sc.parallelize(slots, slots.size()).mapPartitions(it -> List.of(Probe.take()).iterator())
                    .collect()) {
                byExecutor.put(p.executorId(), p);
            }
        }
        if (byExecutor.size() < executors) {
            throw new IllegalStateException("the probe reached only executors " + byExecutor.keySet());
        }
        return byExecutor;
    }

    /**
     * {@code blockmgr-*} and {@code spark-*} directories left in the local directories (SPARK_LOCAL_DIRS,
     * which the driver and the executors of a local cluster share; java.io.tmpdir without it).
     */
    private static int localDirsLeft() {
        String dirs = System.getenv("SPARK_LOCAL_DIRS");
        int n = 0;
        for (String d : (dirs == null ? System.getProperty("java.io.tmpdir") : dirs).split(",")) {
            File[] found = new File(d).listFiles((dir, name) -> name.startsWith("blockmgr-") || name.startsWith("spark-"));
            n += found == null ? 0 : found.length;
        }
        return n;
    }
}
