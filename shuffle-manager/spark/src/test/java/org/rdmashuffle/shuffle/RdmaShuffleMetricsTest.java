package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * rdma-shuffle's metrics source, read from a running application the way operators read Spark's: the
 * driver's through its UI's JSON and Prometheus servlets, each executor's through a sink of its own
 * (CSV here; JMX, Graphite and the others report the same registry).
 */
class RdmaShuffleMetricsTest {
    private static final HttpClient HTTP =
            HttpClient.newBuilder().followRedirects(HttpClient.Redirect.NORMAL).build();

    private static String get(String url) throws IOException, InterruptedException {
        HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(url)).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), url + " answered " + r.statusCode() + ": " + r.body());
        return r.body();
    }

    /** The last value an executor's CSV sink wrote for {@code metric}, or -1 when it wrote none yet. */
    private static long lastCsvValue(Path dir, String appId, String executorId, String metric) throws IOException {
        String v = lastCsvText(dir, appId, executorId, metric);
        return v == null ? -1 : Long.parseLong(v.trim());
    }

    /** The last value (as written) an executor's CSV sink wrote for {@code metric}, or null when none yet. */
    private static String lastCsvText(Path dir, String appId, String executorId, String metric) throws IOException {
        Path f = dir.resolve(appId + "." + executorId + "." + RdmaShuffleSource.NAME + "." + metric + ".csv");
        if (!Files.exists(f)) {
            return null;
        }
        List<String> lines = Files.readAllLines(f);
        if (lines.size() < 2) {
            return null;
        }
        String last = lines.get(lines.size() - 1);
        return last.substring(last.indexOf(',') + 1);
    }

    private static List<String> rdmaKeys(String json) {
        List<String> keys = new java.util.ArrayList<>();
        Matcher k = Pattern.compile("\"([^\"]*rdma[^\"]*)\"").matcher(json);
        while (k.find()) {
            keys.add(k.group(1));
        }
        return keys;
    }

    /** The executor the plugin forces to tcp; the other runs {@code provider=auto}. */
    private static final String FORCED_TCP = "1";

    /**
     * Also which transport each executor runs, where one executor is forced to tcp ({@link ForceTcpOnOneExecutor})
     * and the other runs {@code provider=auto} (tcp, with the reason, on a machine without verbs): the gauges in
     * each executor's sink, the driver's summary from code and as logged, once the executors registered and at
     * the application's end, and the WARN of the executor that fell back.
     */
    @Test
    @Timeout(300)
    void shouldReportReadsPoolAndRegistrationsThroughSparksServletsAndEveryExecutorsSinks() throws Exception {
        assumeTrue(ForceTcpOnOneExecutor.takesEffect(), "Spark " + SparkLines.version() + " builds an executor's "
                + "shuffle manager before its plugins: one executor cannot be forced to tcp");
        // Not a @TempDir: executors' sinks may write a last report after the application stopped.
        Path csv = Files.createTempDirectory("rdma-shuffle-metrics-");
        SparkConf conf = LocalCluster.conf(true)
                .set("spark.shuffle.rdma.provider", "auto")
                .set("spark.plugins", ForceTcpOnOneExecutor.class.getName())
                .set(ForceTcpOnOneExecutor.EXECUTOR_KEY, FORCED_TCP)
                .set("spark.ui.enabled", "true").set("spark.ui.port", "0")
                .set("spark.metrics.conf.*.sink.prometheusServlet.class",
                        "org.apache.spark.metrics.sink.PrometheusServlet")
                .set("spark.metrics.conf.*.sink.prometheusServlet.path", "/metrics/prometheus")
                .set("spark.metrics.conf.executor.sink.csv.class", "org.apache.spark.metrics.sink.CsvSink")
                .set("spark.metrics.conf.executor.sink.csv.period", "1")
                .set("spark.metrics.conf.executor.sink.csv.unit", "seconds")
                .set("spark.metrics.conf.executor.sink.csv.directory", csv.toString());
        String summary;
        DriverLogLines driverLog = new DriverLogLines(NodeDirectory.class);
        try {
            try (LocalCluster cluster = new LocalCluster(conf)) {
                String appId = cluster.sc.sc().applicationId();
                summary = transportSummaryOnceAllReported((RdmaShuffleManager) org.apache.spark.SparkEnv.get()
                        .shuffleManager());
                Map<Integer, Integer> groups = ShuffleJobs.groupSizes(ShuffleJobs.pairs(cluster.sc, 200_000, 8, 5_000),
                        6);
                assertEquals(5_000, groups.size());
                assertEquals(200_000, groups.values().stream().mapToInt(Integer::intValue).sum());
                Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe();
                assertTransports(csv, appId, probes, summary, driverLog);

                // Every executor's own sink: its gauges reach what the executor itself counts.
                long readsSeen = 0;
                for (LocalCluster.ExecutorProbe p : probes.values()) {
                    RdmaShuffleManager.ExecutorStats s = p.stats();
                    long deadline = System.nanoTime() + 30_000_000_000L;
                    long reads;
                    while ((reads = lastCsvValue(csv, appId, p.executorId(), "transport.readsCompleted"))
                            < s.node().readsCompleted() && System.nanoTime() < deadline) {
                        Thread.sleep(250);
                    }
                    assertEquals(s.node().readsCompleted(), reads, "executor " + p.executorId() + "'s readsCompleted");
                    assertEquals(1, lastCsvValue(csv, appId, p.executorId(), "transport.started"));
                    assertTrue(lastCsvValue(csv, appId, p.executorId(), "transport.readsPosted") >= reads);
                    assertEquals(0, lastCsvValue(csv, appId, p.executorId(), "transport.readsFailed"));
                    assertTrue(lastCsvValue(csv, appId, p.executorId(), "transport.bytesRead") > 0
                            || s.node().bytesRead() == 0);
                    assertTrue(lastCsvValue(csv, appId, p.executorId(), "pool.registeredBytes") > 0,
                            "executor " + p.executorId() + " reports its pool's registered memory");
                    assertTrue(lastCsvValue(csv, appId, p.executorId(), "registrations.regions") > 0,
                            "executor " + p.executorId() + " reports its registered regions");
                    readsSeen += reads;
                }
                assertTrue(readsSeen > 0, "no executor reported a READ");

                // The driver's UI: its directory of executors' nodes, as JSON and for Prometheus.
                String ui = cluster.sc.sc().uiWebUrl().get();
                String json = get(ui + "/metrics/json");
                Matcher m = Pattern.compile("\"" + Pattern.quote(appId + ".driver." + RdmaShuffleSource.NAME
                        + ".driver.directoryNodes") + "\"\\s*:\\s*\\{\\s*\"value\"\\s*:\\s*(\\d+)").matcher(json);
                assertTrue(m.find(), "no rdmaShuffle.driver.directoryNodes gauge in " + ui + "/metrics/json: "
                        + rdmaKeys(json));
                assertEquals(LocalCluster.EXECUTORS, Integer.parseInt(m.group(1)));
                assertTrue(json.contains(RdmaShuffleSource.NAME + ".transport.readsCompleted"));
                String prometheus = get(ui + "/metrics/prometheus");
                Matcher p = Pattern.compile("^metrics_\\S*rdmaShuffle_driver_directoryNodes_Value\\S* (\\d+)$",
                        Pattern.MULTILINE).matcher(prometheus);
                assertTrue(p.find(), "no rdmaShuffle directoryNodes line in " + ui + "/metrics/prometheus");
                assertEquals(LocalCluster.EXECUTORS, Integer.parseInt(p.group(1)));
                assertTrue(prometheus.contains("rdmaShuffle_pool_registeredBytes"));
            }
            assertTrue(driverLog.lines().contains("INFO rdma-shuffle transports at application end: " + summary),
                    "the driver logs the summary at the application's end: " + driverLog.lines());
        } finally {
            driverLog.close();
            try (java.util.stream.Stream<Path> files = Files.walk(csv)) {
                files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            }
        }
    }

    /** The driver's transport summary once both executors reported (at most 60 s). */
    private static String transportSummaryOnceAllReported(RdmaShuffleManager driver) throws InterruptedException {
        long deadline = System.nanoTime() + 60_000_000_000L;
        String prefix = LocalCluster.EXECUTORS + " executors: ";
        String summary = driver.transportSummary().orElse("");
        while (!summary.startsWith(prefix) && System.nanoTime() < deadline) {
            Thread.sleep(100);
            summary = driver.transportSummary().orElse("");
        }
        assertTrue(summary.startsWith(prefix), "the driver's transport summary: " + summary);
        return summary;
    }

    /**
     * Each executor's transport gauges (through its CSV sink) and the driver's summary line, from code and from
     * its log: the forced executor runs tcp as asked, the other verbs or, where verbs cannot run, tcp with the
     * reason (and its log says so in one WARN).
     */
    private static void assertTransports(Path csv, String appId, Map<String, LocalCluster.ExecutorProbe> probes,
                                         String summary, DriverLogLines driverLog) throws Exception {
        String other = probes.keySet().stream().filter(id -> !id.equals(FORCED_TCP)).findFirst().orElseThrow();
        assertEquals("tcp", probes.get(FORCED_TCP).stats().provider(), "the forced executor's provider");
        String otherProvider = probes.get(other).stats().provider();
        String otherDevice = probes.get(other).stats().device();
        java.util.Optional<String> noVerbs = org.rdmashuffle.transport.RdmaTransport.unavailable(
                SparkRdmaConf.from(new SparkConf().set("spark.shuffle.rdma.provider", "verbs")));
        assertEquals(noVerbs.isPresent() ? "tcp" : "verbs", otherProvider, "provider=auto on this machine");
        for (String id : probes.keySet()) {
            String provider = probes.get(id).stats().provider();
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (lastCsvText(csv, appId, id, "transport.provider") == null && System.nanoTime() < deadline) {
                Thread.sleep(250);
            }
            assertEquals(provider, lastCsvText(csv, appId, id, "transport.provider"), "executor " + id);
            assertEquals(probes.get(id).stats().device(), lastCsvText(csv, appId, id, "transport.device"));
            assertEquals(provider.equals("verbs") ? 1 : 0, lastCsvValue(csv, appId, id, "transport.verbs"));
        }
        if (otherProvider.equals("tcp")) {
            assertTrue(summary.matches("2 executors: 0 verbs, 2 tcp \\((auto: .+: 1; provider=tcp: 1|"
                    + "provider=tcp: 1; auto: .+: 1)\\)(; e\\.g\\. \".+\")?"), summary);
            Path stderr = Path.of(System.getenv("SPARK_HOME"), "work", appId, other, "stderr");
            List<String> warns = Files.readAllLines(stderr).stream()
                    .filter(l -> l.contains("spark.shuffle.rdma.provider=auto: using tcp")).toList();
            assertEquals(1, warns.size(), "one line on the fallback in " + stderr + ": " + warns);
            assertTrue(warns.get(0).contains("WARN") && warns.get(0).contains(noVerbs.get().substring(
                    noVerbs.get().indexOf("cannot run: ") + "cannot run: ".length())), warns.get(0));
        } else {
            assertEquals("2 executors: 1 verbs (on " + otherDevice + ": 1), 1 tcp (provider=tcp: 1)", summary);
        }
        assertTrue(driverLog.lines().contains("INFO rdma-shuffle transports: " + summary),
                "the driver logs the summary once the executors registered: " + driverLog.lines());
        assertEquals(1, driverLog.lines().stream().filter(l -> l.contains("rdma-shuffle transports: ")).count(),
                "one summary line, not one per executor: " + driverLog.lines());
    }
}
