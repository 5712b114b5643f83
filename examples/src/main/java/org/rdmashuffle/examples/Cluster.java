package org.rdmashuffle.examples;

import org.apache.spark.SparkContext;

/** What the comparisons share about the cluster they run on. */
final class Cluster {
    private Cluster() {
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
