package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

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
        Path f = dir.resolve(appId + "." + executorId + "." + RdmaShuffleSource.NAME + "." + metric + ".csv");
        if (!Files.exists(f)) {
            return -1;
        }
        List<String> lines = Files.readAllLines(f);
        if (lines.size() < 2) {
            return -1;
        }
        String last = lines.get(lines.size() - 1);
        return Long.parseLong(last.substring(last.indexOf(',') + 1).trim());
    }

    private static List<String> rdmaKeys(String json) {
        List<String> keys = new java.util.ArrayList<>();
        Matcher k = Pattern.compile("\"([^\"]*rdma[^\"]*)\"").matcher(json);
        while (k.find()) {
            keys.add(k.group(1));
        }
        return keys;
    }

    @Test
    @Timeout(300)
    void shouldReportReadsPoolAndRegistrationsThroughSparksServletsAndEveryExecutorsSinks() throws Exception {
        // Not a @TempDir: executors' sinks may write a last report after the application stopped.
        Path csv = Files.createTempDirectory("rdma-shuffle-metrics-");
        SparkConf conf = LocalCluster.conf(true)
                .set("spark.ui.enabled", "true").set("spark.ui.port", "0")
                .set("spark.metrics.conf.*.sink.prometheusServlet.class",
                        "org.apache.spark.metrics.sink.PrometheusServlet")
                .set("spark.metrics.conf.*.sink.prometheusServlet.path", "/metrics/prometheus")
                .set("spark.metrics.conf.executor.sink.csv.class", "org.apache.spark.metrics.sink.CsvSink")
                .set("spark.metrics.conf.executor.sink.csv.period", "1")
                .set("spark.metrics.conf.executor.sink.csv.unit", "seconds")
                .set("spark.metrics.conf.executor.sink.csv.directory", csv.toString());
        try (LocalCluster cluster = new LocalCluster(conf)) {
            Map<Integer, Integer> groups = ShuffleJobs.groupSizes(ShuffleJobs.pairs(cluster.sc, 200_000, 8, 5_000), 6);
            assertEquals(5_000, groups.size());
            assertEquals(200_000, groups.values().stream().mapToInt(Integer::intValue).sum());
            String appId = cluster.sc.sc().applicationId();
            Map<String, LocalCluster.ExecutorProbe> probes = cluster.probe();

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
        } finally {
            try (java.util.stream.Stream<Path> files = Files.walk(csv)) {
                files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            }
        }
    }
}
