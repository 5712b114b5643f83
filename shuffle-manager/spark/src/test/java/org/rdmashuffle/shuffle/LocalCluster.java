package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.Set;
import java.util.jar.JarEntry;
import java.util.jar.JarOutputStream;
import java.util.stream.Stream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeoutException;
import java.util.stream.IntStream;
import org.apache.spark.FetchFailed;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.executor.ShuffleReadMetrics;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.sql.SparkSession;
import org.rdmashuffle.shuffle.core.diagnostics.ProcessResources;

/**
 * A real Spark application in {@code local-cluster[2,1,1024]} (two executor JVMs) for the tests,
 * with a listener that keeps every stage's shuffle metrics and every fetch failure, and a probe
 * that asks each executor what its shuffle manager holds.
 */
final class LocalCluster implements AutoCloseable {
    static final int EXECUTORS = 2;

    /** A finished stage's shuffle metrics. */
    record StageShuffle(int stageId, int attempt, long bytesWritten, long recordsWritten, long remoteBytesRead,
                        long localBytesRead, long remoteBlocks, long localBlocks, long recordsRead,
                        long fetchWaitMs) {
    }

    /** What one executor reported to {@link #probe()}. */
    record ExecutorProbe(String executorId, RdmaShuffleManager.ExecutorStats stats, List<String> shuffleFiles,
                         ProcessResources resources) implements Serializable {
        private static final long serialVersionUID = 1L;

        static ExecutorProbe take() {
            SparkEnv env = SparkEnv.get();
            List<String> files = new ArrayList<>();
            for (File dir : env.blockManager().diskBlockManager().localDirs()) {
                collectShuffleFiles(dir, files);
            }
            RdmaShuffleManager.ExecutorStats stats = env.shuffleManager() instanceof RdmaShuffleManager m
                    ? m.executorStats().orElse(null) : null;
            return new ExecutorProbe(env.executorId(), stats, files, ProcessResources.sample());
        }

        private static void collectShuffleFiles(File f, List<String> out) {
            File[] children = f.listFiles();
            if (children == null) {
                if (f.getName().startsWith("shuffle_")) {
                    out.add(f.getName());
                }
                return;
            }
            for (File c : children) {
                collectShuffleFiles(c, out);
            }
        }
    }

    /** Keeps stage metrics and fetch failures; read after {@link #drainEvents()}. */
    static final class Recorder extends SparkListener {
        final List<StageShuffle> stages = new CopyOnWriteArrayList<>();
        final List<FetchFailed> fetchFailures = new CopyOnWriteArrayList<>();
        /** Every task that did not succeed, with why (fetch failures included). */
        final List<String> failedTasks = new CopyOnWriteArrayList<>();

        @Override
        public void onStageCompleted(SparkListenerStageCompleted e) {
            TaskMetrics m = e.stageInfo().taskMetrics();
            if (m == null) {
                return;
            }
            ShuffleReadMetrics r = m.shuffleReadMetrics();
            stages.add(new StageShuffle(e.stageInfo().stageId(), e.stageInfo().attemptNumber(),
                    m.shuffleWriteMetrics().bytesWritten(), m.shuffleWriteMetrics().recordsWritten(),
                    r.remoteBytesRead(), r.localBytesRead(), r.remoteBlocksFetched(), r.localBlocksFetched(),
                    r.recordsRead(), r.fetchWaitTime()));
        }

        @Override
        public void onTaskEnd(SparkListenerTaskEnd e) {
            if (e.reason() instanceof FetchFailed f) {
                fetchFailures.add(f);
            }
            if (!(e.reason() instanceof org.apache.spark.Success$)) {
                failedTasks.add("stage " + e.stageId() + " task " + e.taskInfo().index() + " on executor "
                        + e.taskInfo().executorId() + ": " + e.reason());
            }
        }
    }

    final SparkSession spark;
    final JavaSparkContext sc;
    /** Executor JVMs of this cluster, from its master URL ({@code local-cluster[N,...]}). */
    final int executors;
    final Recorder recorder = new Recorder();

    /** Skips the calling test when the SPARK_HOME the build assembles is missing. */
    static void assumeSparkHome() {
        String home = System.getenv("SPARK_HOME");
        assumeTrue(home != null && new File(home, "jars").isDirectory(),
                "SPARK_HOME with Spark's jars/ is missing (the build assembles it under shuffle-manager/spark/target)");
    }

    private static String jar;

    /**
     * One jar of the project's classes and the tests' (made once per JVM from the class folders the
     * build names), which executors get through {@code spark.jars} alone, as users deploy the plugin.
     */
    static synchronized String pluginJar() {
        if (jar == null) {
            try {
                Path out = Files.createTempFile("rdma-shuffle-test-", ".jar");
                out.toFile().deleteOnExit();
                try (JarOutputStream j = new JarOutputStream(Files.newOutputStream(out))) {
                    Set<String> seen = new HashSet<>();
                    for (String dir : System.getProperty("rdma.test.classpath").split(File.pathSeparator)) {
                        Path root = Path.of(dir);
                        if (!Files.isDirectory(root)) {
                            continue;
                        }
                        try (Stream<Path> files = Files.walk(root)) {
                            for (Path f : (Iterable<Path>) files.filter(Files::isRegularFile)::iterator) {
                                String name = root.relativize(f).toString().replace(File.separatorChar, '/');
                                if (seen.add(name)) {
                                    j.putNextEntry(new JarEntry(name));
                                    Files.copy(f, j);
                                    j.closeEntry();
                                }
                            }
                        }
                    }
                }
                jar = out.toString();
            } catch (IOException e) {
                throw new UncheckedIOException("cannot build the test plugin jar", e);
            }
        }
        return jar;
    }

    /** The base configuration: two executor JVMs, our classes delivered by spark.jars, the tcp provider. */
    static SparkConf conf(boolean rdma) {
        SparkConf conf = new SparkConf().setMaster("local-cluster[" + EXECUTORS + ",1,1024]")
                .setAppName("rdma-shuffle-test")
                .set("spark.ui.enabled", "false").set("spark.driver.host", "127.0.0.1")
                .set("spark.driver.bindAddress", "127.0.0.1")
                .set("spark.jars", pluginJar())
                .set("spark.shuffle.rdma.provider", "tcp")
                // Every executor of a local cluster is on 127.0.0.1: with Spark's default both shuffles would read
                // each other's blocks from disk, and nothing would cross between executors. Tests of that
                // behaviour (SparkLikeReadsTest) set it back.
                .set("spark.shuffle.readHostLocalDisk", "false");
        if (SparkLines.version().startsWith("3.")) {
            // Before 4.0 an executor builds its ShuffleManager before it fetches spark.jars (SPARK-45762):
            // the manager must be on the executor's own class path, as docs/deploying.md tells users.
            conf.set("spark.executor.extraClassPath", pluginJar());
        }
        if (rdma) {
            conf.set("spark.shuffle.manager", RdmaShuffleManager.class.getName());
        }
        return conf;
    }

    /**
     * The same application in this JVM ({@code local[4]}, no executor JVMs): what a test compares with is
     * Spark's sort shuffle's results, which do not depend on where tasks run, and a local application starts
     * in a fraction of a cluster's time. Not for what needs executors (probes, READs, kills).
     */
    static LocalCluster inProcess(SparkConf conf) {
        return new LocalCluster(conf.setMaster("local[4]"));
    }

    LocalCluster(SparkConf conf) {
        assumeSparkHome();
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("local-cluster\\[(\\d+),")
                .matcher(conf.get("spark.master"));
        this.executors = conf.get("spark.master").startsWith("local[") ? 0
                : m.lookingAt() ? Integer.parseInt(m.group(1)) : EXECUTORS;
        this.spark = SparkSession.builder().config(conf).getOrCreate();
        this.sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
        try {
            // Fail fast when executors cannot start (a standalone master would relaunch them forever).
            long deadline = System.nanoTime() + 90_000_000_000L;
            while (sc.sc().getExecutorMemoryStatus().size() < executors + 1) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("executors did not register within 90 s; see "
                            + System.getenv("SPARK_HOME") + "/work/*/*/stderr");
                }
                Thread.sleep(200);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            close();
            throw new AssertionError(e);
        } catch (RuntimeException | Error e) {
            close();
            throw e;
        }
        sc.sc().addSparkListener(recorder);
    }

    /** Waits until the listener has seen every event posted so far. */
    void drainEvents() {
        try {
            sc.sc().listenerBus().waitUntilEmpty(30_000);
        } catch (TimeoutException e) {
            throw new AssertionError("listener events not delivered within 30 s", e);
        }
    }

    /**
     * How many stages have completed, after every event already posted is delivered: a stage of a job that
     * has returned (a probe, say) can otherwise still be on the listener bus and be counted as a later one.
     */
    int stagesCompleted() {
        drainEvents();
        return recorder.stages.size();
    }

    /** Stages completed from index {@code from} of the recorder's list on. */
    List<StageShuffle> stagesSince(int from) {
        drainEvents();
        return new ArrayList<>(recorder.stages.subList(from, recorder.stages.size()));
    }

    /** Every executor's report, keyed by executor id (tasks are spread until each executor answered). */
    Map<String, ExecutorProbe> probe() {
        return probe(executors);
    }

    /** The reports of {@code executors} executors (when some were removed or added since the start). */
    Map<String, ExecutorProbe> probe(int executors) {
        Map<String, ExecutorProbe> byExecutor = new TreeMap<>();
        for (int round = 0; round < 20 && byExecutor.size() < executors; round++) {
            List<Integer> slots = IntStream.range(0, 8 * executors).boxed().toList();
            // Java-serialised by hand: records are beyond Kryo when it is the configured serializer.
            for (byte[] bytes : sc.parallelize(slots, slots.size())
                    .mapPartitions(it -> List.of(javaSerialize(ExecutorProbe.take())).iterator()).collect()) {
                ExecutorProbe p = javaDeserialize(bytes);
                byExecutor.put(p.executorId(), p);
            }
        }
        if (byExecutor.size() < executors) {
            throw new AssertionError("probe reached only executors " + byExecutor.keySet());
        }
        return byExecutor;
    }

    /** Each executor's process id, keyed by executor id (tasks are spread until {@code executors} answered). */
    Map<String, Long> executorPids(int executors) {
        Map<String, Long> pids = new TreeMap<>();
        for (int round = 0; round < 20 && pids.size() < executors; round++) {
            List<Integer> slots = IntStream.range(0, 8 * executors).boxed().toList();
            for (String s : sc.parallelize(slots, slots.size())
                    .map(i -> SparkEnv.get().executorId() + "=" + ProcessHandle.current().pid()).collect()) {
                String[] kv = s.split("=");
                pids.put(kv[0], Long.parseLong(kv[1]));
            }
        }
        if (pids.size() < executors) {
            throw new AssertionError("only executors " + pids.keySet() + " ran tasks");
        }
        return pids;
    }

    /**
     * Runs {@code work} while the process {@code pid} is frozen (SIGSTOP), thawing it (SIGCONT) after
     * {@code frozenMs} whether or not {@code work} is done, and waits for both.
     */
    static <T> T whileFrozen(long pid, long frozenMs, java.util.concurrent.Callable<T> work) throws Exception {
        signal("STOP", pid);
        Thread thaw = new Thread(() -> {
            try {
                Thread.sleep(frozenMs);
                signal("CONT", pid);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        thaw.start();
        try {
            return work.call();
        } finally {
            thaw.join();
        }
    }

    /** Sends {@code sig} to {@code pid} with kill(1). */
    static void signal(String sig, long pid) throws IOException, InterruptedException {
        Process p = new ProcessBuilder("kill", "-" + sig, Long.toString(pid)).inheritIO().start();
        if (!p.waitFor(10, java.util.concurrent.TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new AssertionError("kill -" + sig + " " + pid + " failed");
        }
    }

    /** Skips the calling test when kill(1) is missing. */
    static void assumeKill() {
        assumeTrue(new File("/bin/kill").canExecute() || new File("/usr/bin/kill").canExecute(),
                "needs kill(1) to freeze an executor");
    }

    /** Executor ids Spark has now (the driver excluded). */
    List<String> executorIds() {
        return new ArrayList<>(SparkLines.asJava(sc.sc().getExecutorIds()));
    }

    /** One executor of {@code probes} that holds an output table (map outputs of a shuffle), or fails. */
    static String holdingOutputs(Map<String, ExecutorProbe> probes) {
        for (ExecutorProbe p : probes.values()) {
            if (p.stats() != null && !p.stats().shuffles().isEmpty()) {
                return p.executorId();
            }
        }
        throw new AssertionError("no executor holds map outputs: " + probes.keySet());
    }

    /**
     * How much {@code counter} grew over executors between two probes; an executor gone since
     * {@code before} counts as having stopped at its value there.
     */
    static long growth(Map<String, ExecutorProbe> before, Map<String, ExecutorProbe> after,
                       java.util.function.ToLongFunction<RdmaShuffleManager.ExecutorStats> counter) {
        long sum = 0;
        for (ExecutorProbe p : after.values()) {
            if (p.stats() != null) {
                ExecutorProbe b = before.get(p.executorId());
                sum += counter.applyAsLong(p.stats()) - (b == null || b.stats() == null ? 0
                        : counter.applyAsLong(b.stats()));
            }
        }
        return sum;
    }

    static byte[] javaSerialize(Serializable o) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        try (ObjectOutputStream out = new ObjectOutputStream(b)) {
            out.writeObject(o);
        }
        return b.toByteArray();
    }

    @SuppressWarnings("unchecked")
    static <T> T javaDeserialize(byte[] bytes) {
        try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes))) {
            return (T) in.readObject();
        } catch (IOException | ClassNotFoundException e) {
            throw new AssertionError("cannot read an executor's probe", e);
        }
    }

    @Override
    public void close() {
        spark.stop();
        SparkSession.clearActiveSession();
        SparkSession.clearDefaultSession();
    }
}
