package org.rdmashuffle.examples;

import java.util.List;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;

/** What the comparisons share about the cluster they run on. */
final class Cluster {
    static final String RDMA_MANAGER = "org.rdmashuffle.shuffle.RdmaShuffleManager";

    private Cluster() {
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
     * the user's {@code --conf} settings, and — for the rdma runs — the shuffle manager.
     */
    static SparkConf configure(SparkConf conf, boolean rdma, String jars, List<String[]> extra) {
        if (!jars.isEmpty()) {
            conf.set("spark.jars", jars);
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
