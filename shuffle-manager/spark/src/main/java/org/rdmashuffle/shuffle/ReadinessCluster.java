package org.rdmashuffle.shuffle;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;

/** Which executors the readiness job checks: those the cluster is expected to start, once registered. */
final class ReadinessCluster {
    private static final Pattern LOCAL_CLUSTER = Pattern.compile("local-cluster\\[\\s*(\\d+)\\s*,");
    private static final long POLL_MS = 200;
    /** With no count to wait for: how long no new executor must register before the job starts. */
    private static final long SETTLE_MS = 3_000;
    static final String DRIVER = "driver";

    private ReadinessCluster() {
    }

    /**
     * How many executors to wait for: {@code --executors}, else {@code spark.executor.instances}, a local
     * cluster's count, or dynamic allocation's initial (or minimum) count; 0 when the configuration does not
     * say (then the job takes those registered once no new one came for a few seconds).
     */
    static int expected(SparkConf conf, ReadinessArguments a) {
        if (a.executors() > 0) {
            return a.executors();
        }
        int instances = conf.getInt("spark.executor.instances", 0);
        if (instances > 0) {
            return instances;
        }
        Matcher m = LOCAL_CLUSTER.matcher(conf.get("spark.master", ""));
        if (m.lookingAt()) {
            return Integer.parseInt(m.group(1));
        }
        if (conf.getBoolean("spark.dynamicAllocation.enabled", false)) {
            return Math.max(conf.getInt("spark.dynamicAllocation.initialExecutors", 0),
                    conf.getInt("spark.dynamicAllocation.minExecutors", 0));
        }
        return 0;
    }

    /** Whether the application runs in one JVM ({@code local}, {@code local[N]}): the driver is the executor. */
    static boolean localMode(SparkConf conf) {
        String master = conf.get("spark.master", "");
        return master.equals("local") || master.startsWith("local[");
    }

    /**
     * Waits up to {@code --wait-seconds} for the expected executors to register and returns them, id to host
     * (in local mode, the driver); adds a problem when fewer came.
     */
    static Map<String, String> awaitExecutors(SparkContext sc, ReadinessArguments a, List<String> problems) {
        SparkConf conf = sc.getConf();
        if (localMode(conf)) {
            Map<String, String> hosts = new TreeMap<>(ReadinessReport.EXECUTOR_ORDER);
            hosts.put(DRIVER, SparkEnv.get().blockManager().blockManagerId().host());
            return hosts;
        }
        int expected = expected(conf, a);
        long deadline = System.nanoTime() + a.waitSeconds() * 1_000_000_000L;
        Map<String, String> hosts = executors();
        long lastChange = System.nanoTime();
        while (System.nanoTime() < deadline) {
            boolean enough = expected > 0 ? hosts.size() >= expected
                    : !hosts.isEmpty() && System.nanoTime() - lastChange >= SETTLE_MS * 1_000_000L;
            if (enough) {
                return hosts;
            }
            try {
                Thread.sleep(POLL_MS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                problems.add("interrupted while waiting for executors");
                return hosts;
            }
            Map<String, String> now = executors();
            if (!now.keySet().equals(hosts.keySet())) {
                lastChange = System.nanoTime();
            }
            hosts = now;
        }
        if (hosts.isEmpty()) {
            problems.add("no executor registered within " + a.waitSeconds() + " s (--wait-seconds)");
        } else if (expected > 0 && hosts.size() < expected) {
            problems.add("only " + hosts.size() + " of " + expected + " executors registered within "
                    + a.waitSeconds() + " s (--executors, --wait-seconds); checked those");
        }
        return hosts;
    }

    /** The executors registered now (not the driver), id to host, ids in {@link ReadinessReport#EXECUTOR_ORDER}. */
    private static Map<String, String> executors() {
        Map<String, String> hosts = new TreeMap<>(ReadinessReport.EXECUTOR_ORDER);
        hosts.putAll(SparkInterop.blockManagerHosts(SparkEnv.get()));
        hosts.remove(DRIVER);
        return hosts;
    }
}
