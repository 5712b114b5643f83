package org.rdmashuffle.shuffle;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.ObjectStreamClass;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.function.Function;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.shuffle.ReadinessReport.Pair;
import org.rdmashuffle.shuffle.ReadinessReport.Placed;

/**
 * The readiness job: is this cluster ready for rdma-shuffle? Run it as an application of its own with the
 * cluster's rdma-shuffle settings,
 * {@code spark-submit --class org.rdmashuffle.shuffle.ReadinessCheck <plugin jar> [--mib N] [--reads N]}.
 * It waits for the executors, places one task on each, and through each executor's rdma-shuffle node
 * (the one its shuffles use): registers a region with a pattern of the executor's own (stage 1), makes
 * every executor READ from every other and verify every byte (stage 2), and deregisters the regions
 * (stage 3, also when something failed). It prints the matrix ({@link ReadinessReport}: lines starting
 * {@code readiness:}) and exits 0 when every pair is OK, 1 when one is not (or an executor runs tcp under
 * {@code provider=verbs} with {@code fallback=never}), 2 on bad usage.
 */
public final class ReadinessCheck {
    /** Rounds of tasks for the executors a round's tasks did not reach (delay scheduling may place elsewhere). */
    private static final int PLACEMENT_ROUNDS = 3;

    private ReadinessCheck() {
    }

    public static void main(String[] args) {
        ReadinessArguments a;
        try {
            a = ReadinessArguments.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("readiness: " + e.getMessage());
            System.err.println(ReadinessArguments.USAGE);
            System.exit(2);
            return;
        }
        if (a.help()) {
            System.out.println(ReadinessArguments.USAGE);
            return;
        }
        SparkConf conf = new SparkConf().setIfMissing("spark.app.name", "rdma-shuffle readiness");
        String wrong = wrongManager(conf);
        if (wrong != null) {
            System.err.println("readiness: " + wrong);
            System.exit(2);
            return;
        }
        int status;
        SparkContext sc;
        try {
            sc = new SparkContext(conf);
        } catch (Exception e) { // provider=verbs with fallback=never on a driver without a device, say
            Throwable why = e instanceof java.lang.reflect.InvocationTargetException && e.getCause() != null
                    ? e.getCause() : e; // Spark builds the shuffle manager by reflection
            System.out.println("readiness: FAIL the application could not start: " + ReadinessReads.cause(why));
            System.out.println("readiness: verdict FAIL: no executor checked");
            System.exit(1);
            return;
        }
        try {
            ReadinessReport r = run(sc, a);
            System.out.print(r.text());
            status = r.exitStatus();
        } catch (RuntimeException e) {
            System.out.println("readiness: FAIL the check itself failed: " + ReadinessReads.cause(e));
            e.printStackTrace();
            status = 1;
        } finally {
            System.out.flush();
            sc.stop();
        }
        System.exit(status);
    }

    /** Why {@code conf} does not run rdma-shuffle, or null when it does. */
    static String wrongManager(SparkConf conf) {
        String manager = conf.get("spark.shuffle.manager", "sort");
        if (manager.equals(RdmaShuffleManager.class.getName())) {
            return null;
        }
        return "spark.shuffle.manager is '" + manager + "', not " + RdmaShuffleManager.class.getName()
                + ": run the readiness job with --conf spark.shuffle.manager=" + RdmaShuffleManager.class.getName()
                + " and the rdma-shuffle settings of the jobs it checks for";
    }

    /** Runs the check on {@code sc}'s executors and returns the matrix (printing nothing). */
    static ReadinessReport run(SparkContext sc, ReadinessArguments a) {
        return run(sc, a, (runId, placed) -> placed);
    }

    /**
     * What happens between stage 1 and stage 2, for tests: given the run id and what each executor registered,
     * returns what the readers are told (a test may deregister a region, or hand out a descriptor that lies).
     */
    @FunctionalInterface
    interface BetweenStages {
        List<Placed> apply(String runId, List<Placed> placed);
    }

    /** As {@link #run(SparkContext, ReadinessArguments)}, with {@code between} run between stages 1 and 2. */
    static ReadinessReport run(SparkContext sc, ReadinessArguments a, BetweenStages between) {
        String wrong = wrongManager(sc.getConf());
        if (wrong != null) {
            throw new IllegalArgumentException(wrong);
        }
        RdmaShuffleConf conf = SparkRdmaConf.from(sc.getConf());
        boolean strict = conf.provider() == RdmaShuffleConf.Provider.VERBS
                && conf.fallback() == RdmaShuffleConf.Fallback.NEVER;
        String header = "checking with provider=" + conf.provider().name().toLowerCase(Locale.ROOT)
                + " fallback=" + conf.fallback().name().toLowerCase(Locale.ROOT)
                + (strict ? " (strict: every executor must run verbs)" : "")
                + ", " + a.regionMiB() + " MiB region per executor, " + a.reads()
                + " READs of 1 MiB per pair, one at a time";
        List<String> problems = new ArrayList<>();
        List<String> notes = new ArrayList<>();
        RdmaShuffleManager manager = (RdmaShuffleManager) SparkEnv.get().shuffleManager();
        if (manager.driverFallback().isPresent()) {
            problems.add("the driver uses Spark's sort shuffle for every shuffle: " + manager.driverFallback().get());
            return ReadinessReport.of(header, List.of(), List.of(), problems, notes, strict);
        }
        manager.ensureDirectory(); // executors register their nodes there before any shuffle of this job
        Map<String, String> hosts = ReadinessCluster.awaitExecutors(sc, a, problems);
        String runId = UUID.randomUUID().toString();
        int mib = a.regionMiB();
        Duration budget = Duration.ofSeconds(a.stageSeconds());
        Map<String, byte[]> registered = Map.of();
        List<Placed> placed = new ArrayList<>();
        List<Pair> pairs = new ArrayList<>();
        try {
            registered = onEach(sc, hosts, i -> javaSerialize(ReadinessExecutor.register(runId, mib)), problems,
                    "stage 1 (register)", budget);
            for (Map.Entry<String, String> e : hosts.entrySet()) {
                byte[] p = registered.get(e.getKey());
                placed.add(p != null ? javaDeserialize(p) : Placed.failed(e.getKey(), e.getValue(),
                        "no task of stage 1 ran there"));
            }
            List<Placed> told = List.copyOf(between.apply(runId, List.copyOf(placed)));
            int reads = a.reads();
            Map<String, byte[]> measured = onEach(sc, hosts,
                    i -> javaSerialize(new ArrayList<>(ReadinessExecutor.readPeers(runId, told, reads))), problems,
                    "stage 2 (READ)", budget);
            for (byte[] b : measured.values()) {
                List<Pair> some = javaDeserialize(b);
                pairs.addAll(some);
            }
        } finally {
            // Every executor, not only those whose stage-1 result came back: a job that failed part-way may
            // have registered regions whose results were lost with it.
            List<String> releaseProblems = new ArrayList<>();
            Map<String, byte[]> released = onEach(sc, hosts,
                    i -> javaSerialize(ReadinessExecutor.release(runId)), releaseProblems, "stage 3 (deregister)",
                    budget);
            for (String id : hosts.keySet()) {
                byte[] p = registered.get(id);
                boolean mayHold = p == null || ReadinessCheck.<Placed>javaDeserialize(p).ok();
                if (mayHold && !released.containsKey(id)) {
                    notes.add("the region of this run " + (p == null ? "may stay" : "stays") + " registered on "
                            + "executor " + id + " until its node closes: no task of stage 3 ran there"
                            + (releaseProblems.isEmpty() ? "" : " (" + String.join("; ", releaseProblems) + ")"));
                }
            }
        }
        return ReadinessReport.of(header, placed, pairs, problems, notes, strict);
    }

    /** As the six-argument form, with the default budget ({@link ReadinessArguments#DEFAULT_STAGE_SECONDS}). */
    static Map<String, byte[]> onEach(SparkContext sc, Map<String, String> targets,
                                      Function<Integer, byte[]> work, List<String> problems, String stage) {
        return onEach(sc, targets, work, problems, stage,
                Duration.ofSeconds(ReadinessArguments.DEFAULT_STAGE_SECONDS));
    }

    /**
     * Runs {@code work} once on each executor of {@code targets} (id to host), a task pinned to each, with
     * further rounds for executors a round did not reach. Returns each executor's result, keyed by the
     * executor the task ran on (the first result where two ran on one); a job that fails is a problem. The
     * stage's jobs run in a job group of their own that is cancelled (tasks interrupted) once {@code budget}
     * has passed — a pinned task whose executor was lost and not replaced would otherwise wait forever — and
     * that is a problem naming the stage.
     */
    static Map<String, byte[]> onEach(SparkContext sc, Map<String, String> targets,
                                      Function<Integer, byte[]> work, List<String> problems, String stage,
                                      Duration budget) {
        Map<String, byte[]> results = new LinkedHashMap<>();
        String group = "rdma-shuffle-readiness-" + UUID.randomUUID();
        AtomicBoolean expired = new AtomicBoolean();
        ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "rdma-shuffle readiness deadline");
            t.setDaemon(true);
            return t;
        });
        sc.setJobGroup(group, "rdma-shuffle readiness " + stage, true);
        try {
            timer.schedule(() -> {
                expired.set(true);
                sc.cancelJobGroup(group);
            }, budget.toMillis(), TimeUnit.MILLISECONDS);
            for (int round = 0; round < PLACEMENT_ROUNDS && !expired.get()
                    && !results.keySet().containsAll(targets.keySet()); round++) {
                List<Integer> items = new ArrayList<>();
                List<String> locations = new ArrayList<>();
                for (Map.Entry<String, String> t : targets.entrySet()) {
                    if (!results.containsKey(t.getKey())) {
                        items.add(items.size());
                        locations.add("executor_" + t.getValue() + "_" + t.getKey());
                    }
                }
                List<byte[]> tagged;
                try {
                    tagged = SparkInterop.pinned(sc, items, locations)
                            .map(i -> tag(ReadinessExecutor.executorId(), work.call(i))).collect();
                } catch (Exception e) { // Spark's job failure is a SparkException, checked in Java but undeclared
                    if (!expired.get()) {
                        problems.add(stage + " failed: " + ReadinessReads.cause(e));
                    }
                    break;
                }
                for (byte[] t : tagged) {
                    Object[] idAndResult = javaDeserialize(t);
                    results.putIfAbsent((String) idAndResult[0], (byte[]) idAndResult[1]);
                }
            }
        } finally {
            timer.shutdownNow();
            sc.clearJobGroup();
        }
        if (expired.get() && !results.keySet().containsAll(targets.keySet())) {
            problems.add(stage + " did not finish within " + budget.toSeconds() + " s (--stage-seconds): its job"
                    + " was cancelled, " + results.size() + " of " + targets.size() + " executors answered"
                    + " (was an executor lost mid-stage and not replaced?)");
        }
        return results;
    }

    private static byte[] tag(String executorId, byte[] result) {
        return javaSerialize(new Object[] {executorId, result});
    }

    /**
     * Java serialisation by hand: results pass as bytes, whatever {@code spark.serializer} is (records are
     * beyond Kryo), and are read with this class's loader (the plugin jar's).
     */
    static byte[] javaSerialize(Serializable o) {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        try (ObjectOutputStream out = new ObjectOutputStream(b)) {
            out.writeObject(o);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return b.toByteArray();
    }

    @SuppressWarnings("unchecked")
    static <T> T javaDeserialize(byte[] bytes) {
        try (ObjectInputStream in = new PluginObjectInput(new ByteArrayInputStream(bytes))) {
            return (T) in.readObject();
        } catch (IOException | ClassNotFoundException e) {
            throw new IllegalStateException("cannot read an executor's readiness result", e);
        }
    }

    /** Resolves classes with the plugin's loader, wherever the plugin jar came from. */
    private static final class PluginObjectInput extends ObjectInputStream {
        PluginObjectInput(InputStream in) throws IOException {
            super(in);
        }

        @Override
        protected Class<?> resolveClass(ObjectStreamClass desc) throws IOException, ClassNotFoundException {
            try {
                return Class.forName(desc.getName(), false, ReadinessCheck.class.getClassLoader());
            } catch (ClassNotFoundException e) {
                return super.resolveClass(desc);
            }
        }
    }
}
