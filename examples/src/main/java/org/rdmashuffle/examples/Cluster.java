package org.rdmashuffle.examples;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;

/** What the comparisons share about the cluster they run on. */
final class Cluster {
    static final String RDMA_MANAGER = "org.rdmashuffle.shuffle.RdmaShuffleManager";

    private Cluster() {
    }

    /**
     * The options every comparison takes ({@code --rounds --master --executors --jars --out --conf}),
     * parsed once; the workload's own options (those named when parsing) are kept by name.
     */
    static final class Options {
        int rounds;
        String master;
        int executors;
        String jars = "";
        Path out = Path.of("examples/target/comparison");
        final List<String[]> conf = new ArrayList<>();
        private final Map<String, String> workload = new LinkedHashMap<>();

        /** @throws IllegalArgumentException naming the option that is missing a value, unknown or malformed */
        static Options parse(String[] args, int rounds, String master, Set<String> workloadOptions) {
            Options o = new Options();
            o.rounds = rounds;
            o.master = master;
            for (int i = 0; i < args.length; i += 2) {
                String a = args[i];
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException("missing value for " + a);
                }
                String v = args[i + 1];
                switch (a) {
                    case "--rounds" -> o.rounds = Integer.parseInt(v);
                    case "--master" -> o.master = v;
                    case "--executors" -> o.executors = Integer.parseInt(v);
                    case "--jars" -> o.jars = v;
                    case "--out" -> o.out = Path.of(v);
                    case "--conf" -> o.conf.add(parseConf(v));
                    default -> {
                        if (!workloadOptions.contains(a)) {
                            throw new IllegalArgumentException("unknown option " + a);
                        }
                        o.workload.put(a, v);
                    }
                }
            }
            if (o.rounds <= 0) {
                throw new IllegalArgumentException("--rounds must be positive");
            }
            return o;
        }

        /** The value of a workload option, or {@code fallback} when it was not given. */
        String get(String option, String fallback) {
            return workload.getOrDefault(option, fallback);
        }
    }

    /** A {@code --conf key=value} option as {key, value}; a clear error otherwise. */
    static String[] parseConf(String option) {
        int eq = option.indexOf('=');
        if (eq <= 0) {
            throw new IllegalArgumentException("--conf takes key=value, not " + option);
        }
        return new String[] {option.substring(0, eq), option.substring(eq + 1)};
    }

    /**
     * What every comparison run sets on top of its workload's settings: the jars executors load,
     * the user's {@code --conf} settings, and — for the rdma runs — the shuffle manager. On a
     * {@code local-cluster} master every executor is on one host, where both shuffles would read the other
     * executors' blocks from disk ({@code spark.shuffle.readHostLocalDisk}, on by default) and nothing
     * would cross between executors: there it is off for both, unless {@code --conf} sets it.
     */
    static SparkConf configure(SparkConf conf, boolean rdma, String jars, List<String[]> extra) {
        if (!jars.isEmpty()) {
            conf.set("spark.jars", jars);
        }
        if (conf.get("spark.master", "").startsWith("local-cluster")) {
            conf.set("spark.shuffle.readHostLocalDisk", "false");
        }
        for (String[] kv : extra) {
            conf.set(kv[0], kv[1]);
        }
        if (rdma) {
            conf.set("spark.shuffle.manager", RDMA_MANAGER);
        }
        return conf;
    }

    /** Waits for {@code executors} executors (for local-cluster: as many as its URL starts). */
    static void waitForExecutors(SparkContext sc, String master, int executors) {
        int wanted = master.startsWith("local-cluster[")
                ? Integer.parseInt(master.substring("local-cluster[".length()).split(",")[0].trim()) : executors;
        long deadline = System.nanoTime() + 120_000_000_000L;
        while (sc.getExecutorMemoryStatus().size() < wanted + 1) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("executors did not register within 120 s; see "
                        + System.getenv("SPARK_HOME") + "/work/*/*/stderr");
            }
            try {
                Thread.sleep(200);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        }
    }
}
