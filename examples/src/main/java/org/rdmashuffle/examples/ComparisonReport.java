package org.rdmashuffle.examples;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.ToDoubleFunction;
import org.jfree.chart.ChartFactory;
import org.jfree.chart.ChartUtils;
import org.jfree.chart.JFreeChart;
import org.jfree.chart.plot.PlotOrientation;
import org.jfree.data.category.DefaultCategoryDataset;

/**
 * The comparison's results: one row per run, the medians per shuffle manager and their ratio
 * (rdma / sort), as Markdown, CSV, JSON and a bar chart of the medians.
 */
final class ComparisonReport {
    /** One run's measurements: times in seconds, sizes in bytes. */
    record Run(int round, String manager, double jobSeconds, double reduceStageSeconds, long shuffleWritten,
               long remoteRead, long localRead, double fetchWaitSeconds, double executorCpuSeconds,
               double gcSeconds) {
    }

    private static final String[] COLUMNS = {"round", "manager", "job s", "reduce stage s", "shuffle written MB",
        "remote read MB", "local read MB", "fetch wait s", "executor CPU s", "GC s"};

    private static final Map<String, ToDoubleFunction<Run>> MEDIANS = new LinkedHashMap<>();

    static {
        MEDIANS.put("job s", Run::jobSeconds);
        MEDIANS.put("reduce stage s", Run::reduceStageSeconds);
        MEDIANS.put("fetch wait s", Run::fetchWaitSeconds);
        MEDIANS.put("executor CPU s", Run::executorCpuSeconds);
        MEDIANS.put("GC s", Run::gcSeconds);
    }

    private final String workload;
    private final List<Run> runs;

    ComparisonReport(String workload, List<Run> runs) {
        this.workload = workload;
        this.runs = List.copyOf(runs);
    }

    static String header() {
        return "| " + String.join(" | ", COLUMNS) + " |\n|" + " --- |".repeat(COLUMNS.length);
    }

    static String row(Run r) {
        return "| " + String.join(" | ", cells(r)) + " |";
    }

    private static String[] cells(Run r) {
        return new String[] {Integer.toString(r.round()), r.manager(), f(r.jobSeconds()), f(r.reduceStageSeconds()),
            mb(r.shuffleWritten()), mb(r.remoteRead()), mb(r.localRead()), f(r.fetchWaitSeconds()),
            f(r.executorCpuSeconds()), f(r.gcSeconds())};
    }

    private static String f(double v) {
        return String.format(Locale.ROOT, "%.2f", v);
    }

    private static String mb(long bytes) {
        return String.format(Locale.ROOT, "%.1f", bytes / 1e6);
    }

    double median(String manager, ToDoubleFunction<Run> f) {
        double[] v = runs.stream().filter(r -> r.manager().equals(manager)).mapToDouble(f).sorted().toArray();
        if (v.length == 0) {
            return Double.NaN;
        }
        return v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
    }

    String markdown() {
        StringBuilder b = new StringBuilder(header()).append('\n');
        for (Run r : runs) {
            b.append(row(r)).append('\n');
        }
        b.append("\n| median | sort | rdma | rdma / sort |\n| --- | --- | --- | --- |\n");
        for (Map.Entry<String, ToDoubleFunction<Run>> m : MEDIANS.entrySet()) {
            double s = median("sort", m.getValue());
            double r = median("rdma", m.getValue());
            b.append("| ").append(m.getKey()).append(" | ").append(f(s)).append(" | ").append(f(r)).append(" | ")
                    .append(s == 0 ? "n/a" : f(r / s)).append(" |\n");
        }
        return b.toString();
    }

    String csv() {
        StringBuilder b = new StringBuilder(String.join(",", Arrays.stream(COLUMNS)
                .map(c -> c.replace(' ', '_')).toList())).append('\n');
        for (Run r : runs) {
            b.append(String.join(",", cells(r))).append('\n');
        }
        return b.toString();
    }

    String json() throws IOException {
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("workload", workload);
        doc.put("runs", runs);
        Map<String, Object> medians = new LinkedHashMap<>();
        for (Map.Entry<String, ToDoubleFunction<Run>> m : MEDIANS.entrySet()) {
            double s = median("sort", m.getValue());
            double r = median("rdma", m.getValue());
            medians.put(m.getKey(), Map.of("sort", s, "rdma", r, "ratio", s == 0 ? Double.NaN : r / s));
        }
        doc.put("medians", medians);
        return new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValueAsString(doc);
    }

    /** Writes {@code <workload>.md/.csv/.json/.png} to {@code dir}; returns what could not be written. */
    String writeTo(Path dir) throws IOException {
        Files.createDirectories(dir);
        Files.writeString(dir.resolve(workload + ".md"), markdown());
        Files.writeString(dir.resolve(workload + ".csv"), csv());
        Files.writeString(dir.resolve(workload + ".json"), json());
        DefaultCategoryDataset data = new DefaultCategoryDataset();
        for (String metric : List.of("job s", "reduce stage s", "executor CPU s")) {
            data.addValue(median("sort", MEDIANS.get(metric)), "Spark sort shuffle", metric);
            data.addValue(median("rdma", MEDIANS.get(metric)), "rdma-shuffle", metric);
        }
        try {
            JFreeChart chart = ChartFactory.createBarChart(workload + ": medians of " + runs.size() / 2 + " round(s)",
                    null, "seconds", data, PlotOrientation.VERTICAL, true, false, false);
            ChartUtils.saveChartAsPNG(dir.resolve(workload + ".png").toFile(), chart, 800, 450);
            return "";
        } catch (RuntimeException | Error e) { // a JDK without fonts (fontconfig) cannot render text
            return "chart not written (" + e + "); install fontconfig and a font to get it";
        }
    }
}
