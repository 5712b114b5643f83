package org.rdmashuffle.examples;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.spark.SparkConf;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.jfree.chart.ChartFactory;
import org.jfree.chart.ChartUtils;
import org.jfree.chart.plot.PlotOrientation;
import org.jfree.data.category.DefaultCategoryDataset;

/**
 * TPC-DS under Spark's sort shuffle and under rdma-shuffle: data generated once at a scale factor
 * (Parquet), then every query (loaded at run time from Spark's own {@code spark-sql} tests jar,
 * resources {@code tpcds/q*.sql}) run on each manager in turn; results compared row for row after
 * sorting, floating-point values to 9 significant digits. Prints progress per query, then per-query
 * times with their ratio and the totals; writes Markdown, CSV, JSON and a chart.
 *
 * <p>Options: {@code --scale S} (1), {@code --data DIR}, {@code --queries all|q1,q14a,…},
 * {@code --rounds R} (1), {@code --master URL} (local-cluster[2,1,2048]), {@code --executors N},
 * {@code --jars …}, {@code --out DIR}, {@code --conf k=v}.
 */
public final class TpcdsComparison {
    private TpcdsComparison() {
    }

    /** The query names in Spark's tests jar, in TPC-DS order (q14a, q14b, … where a query has variants). */
    static List<String> allQueries() {
        List<String> names = new ArrayList<>();
        ClassLoader cl = TpcdsComparison.class.getClassLoader();
        for (int i = 1; i <= 99; i++) {
            if (cl.getResource("tpcds/q" + i + ".sql") != null) {
                names.add("q" + i);
            } else {
                for (String v : List.of("a", "b")) {
                    if (cl.getResource("tpcds/q" + i + v + ".sql") != null) {
                        names.add("q" + i + v);
                    }
                }
            }
        }
        if (names.isEmpty()) {
            throw new IllegalStateException("no tpcds/q*.sql on the class path: add Spark's "
                    + "spark-sql_2.13-4.2.0-tests.jar (the run script puts it in examples/target/lib)");
        }
        return names;
    }

    static String text(String query) throws IOException {
        try (InputStream in = TpcdsComparison.class.getClassLoader().getResourceAsStream("tpcds/" + query + ".sql")) {
            if (in == null) {
                throw new IllegalArgumentException("unknown query " + query);
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    /** A row as text, floating point to 9 significant digits (summation order may differ). */
    static String normalise(Row r) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < r.length(); i++) {
            Object v = r.get(i);
            if (v instanceof Double || v instanceof Float) {
                double d = ((Number) v).doubleValue();
                b.append(Double.isFinite(d) ? String.format(Locale.ROOT, "%.9g", d) : Double.toString(d));
            } else {
                b.append(v);
            }
            b.append('|');
        }
        return b.toString();
    }

    /** One query on one manager: its time, rows, and the shuffle and CPU figures of its stages. */
    record QueryRun(String query, String manager, int round, double seconds, int rows, String error,
                    long shuffleWritten, long remoteRead, long localRead, double fetchWaitSeconds,
                    double executorCpuSeconds, double gcSeconds) {
    }

    public static void main(String[] args) throws Exception {
        Cluster.Options o = Cluster.Options.parse(args, 1, "local-cluster[2,1,2048]",
                java.util.Set.of("--scale", "--data", "--queries", "--chunks"));
        double scale = Double.parseDouble(o.get("--scale", "1"));
        String queries = o.get("--queries", "all");
        int chunks = Integer.parseInt(o.get("--chunks", "32"));
        Path data = Path.of(o.get("--data", "examples/target/tpcds-sf"
                + (scale == Math.floor(scale) ? Long.toString((long) scale) : Double.toString(scale))));
        List<String> names = queries.equals("all") ? allQueries() : List.of(queries.split(","));
        System.out.printf(Locale.ROOT, "TPC-DS scale %s, %d queries, %d round(s), on %s; data in %s%n", scale,
                names.size(), o.rounds, o.master, data.toAbsolutePath());
        List<QueryRun> runs = new ArrayList<>();
        Map<String, List<String>> reference = new LinkedHashMap<>();
        List<String> mismatches = new ArrayList<>();
        for (int round = 1; round <= o.rounds; round++) {
            for (boolean rdma : new boolean[] {false, true}) {
                SparkConf conf = new SparkConf().setMaster(o.master).setAppName("tpcds-" + (rdma ? "rdma" : "sort"))
                        .set("spark.ui.enabled", "false").set("spark.sql.shuffle.partitions", "16")
                        .set("spark.executor.memory", o.master.startsWith("local-cluster") ? "1536m" : "1g");
                Cluster.configure(conf, rdma, o.jars, o.conf);
                String manager = rdma ? "rdma" : "sort";
                SparkSession spark = SparkSession.builder().config(conf).getOrCreate();
                try {
                    Cluster.waitForExecutors(spark.sparkContext(), o.master, o.executors);
                    TpcdsData.generate(spark, scale, data, chunks);
                    TpcdsData.register(spark, data);
                    StageRecorder recorder = new StageRecorder();
                    spark.sparkContext().addSparkListener(recorder);
                    for (String q : names) {
                        spark.sparkContext().listenerBus().waitUntilEmpty(30_000);
                        int firstStage = recorder.stages.size();
                        long t0 = System.nanoTime();
                        List<String> rows = new ArrayList<>();
                        String error = null;
                        try {
                            for (Row r : spark.sql(text(q)).collectAsList()) {
                                rows.add(normalise(r));
                            }
                            rows.sort(null);
                        } catch (Exception e) { // Spark's AnalysisException is checked in Java's eyes
                            error = e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage()).lines()
                                    .findFirst().orElse("");
                        }
                        double s = (System.nanoTime() - t0) / 1e9;
                        spark.sparkContext().listenerBus().waitUntilEmpty(30_000);
                        List<StageRecorder.Stage> st = recorder.stages.subList(firstStage, recorder.stages.size());
                        runs.add(new QueryRun(q, manager, round, s, rows.size(), error,
                                st.stream().mapToLong(StageRecorder.Stage::bytesWritten).sum(),
                                st.stream().mapToLong(StageRecorder.Stage::remoteBytesRead).sum(),
                                st.stream().mapToLong(StageRecorder.Stage::localBytesRead).sum(),
                                st.stream().mapToLong(StageRecorder.Stage::fetchWaitMs).sum() / 1e3,
                                st.stream().mapToLong(StageRecorder.Stage::executorCpuMs).sum() / 1e3,
                                st.stream().mapToLong(StageRecorder.Stage::gcMs).sum() / 1e3));
                        List<String> ref = reference.putIfAbsent(q, rows);
                        boolean same = ref == null || ref.equals(rows);
                        if (!same) {
                            mismatches.add(q + " (" + manager + ", round " + round + ")");
                        }
                        System.out.printf(Locale.ROOT, "%-5s %-4s round %d: %7.2f s, %4d rows%s%s%n", q, manager,
                                round, s, rows.size(), error == null ? "" : "  FAILED " + error,
                                same ? "" : "  DIFFERENT from sort shuffle");
                    }
                } finally {
                    spark.stop();
                    SparkSession.clearActiveSession();
                    SparkSession.clearDefaultSession();
                }
            }
        }
        String md = report(names, runs);
        System.out.println();
        System.out.println(md);
        Files.createDirectories(o.out);
        Files.writeString(o.out.resolve("tpcds.md"), md);
        Files.writeString(o.out.resolve("tpcds.json"), new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT)
                .writeValueAsString(Map.of("scale", scale, "runs", runs, "mismatches", mismatches)));
        StringBuilder csv = new StringBuilder("query,manager,round,seconds,rows,shuffle_written,remote_read,"
                + "local_read,fetch_wait_s,executor_cpu_s,gc_s,error\n");
        runs.forEach(r -> csv.append(String.join(",", r.query(), r.manager(), Integer.toString(r.round()),
                String.format(Locale.ROOT, "%.3f", r.seconds()), Integer.toString(r.rows()),
                Long.toString(r.shuffleWritten()), Long.toString(r.remoteRead()), Long.toString(r.localRead()),
                String.format(Locale.ROOT, "%.3f", r.fetchWaitSeconds()),
                String.format(Locale.ROOT, "%.3f", r.executorCpuSeconds()),
                String.format(Locale.ROOT, "%.3f", r.gcSeconds()),
                r.error() == null ? "" : '"' + r.error().replace("\"", "'") + '"')).append('\n'));
        Files.writeString(o.out.resolve("tpcds.csv"), csv);
        chart(names, runs, o.out.resolve("tpcds.png"));
        if (!mismatches.isEmpty()) {
            System.err.println("results DIFFER from sort shuffle for " + mismatches);
            System.exit(1);
        }
        System.out.println("every query's result identical under both managers; tables in " + o.out.toAbsolutePath());
    }

    private static double median(List<QueryRun> runs, String q, String manager) {
        double[] v = runs.stream().filter(r -> r.query().equals(q) && r.manager().equals(manager))
                .mapToDouble(QueryRun::seconds).sorted().toArray();
        return v.length == 0 ? Double.NaN : v.length % 2 == 1 ? v[v.length / 2]
                : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
    }

    static String report(List<String> names, List<QueryRun> runs) {
        StringBuilder b = new StringBuilder("| query | sort s | rdma s | rdma / sort | rows | status |\n"
                + "| --- | --- | --- | --- | --- | --- |\n");
        double sortTotal = 0;
        double rdmaTotal = 0;
        for (String q : names) {
            double s = median(runs, q, "sort");
            double r = median(runs, q, "rdma");
            sortTotal += s;
            rdmaTotal += r;
            QueryRun any = runs.stream().filter(x -> x.query().equals(q)).findFirst().orElseThrow();
            String status = runs.stream().filter(x -> x.query().equals(q) && x.error() != null).map(QueryRun::error)
                    .findFirst().orElse("ok");
            b.append(String.format(Locale.ROOT, "| %s | %.2f | %.2f | %.2f | %d | %s |%n", q, s, r, r / s,
                    any.rows(), status));
        }
        b.append(String.format(Locale.ROOT, "| **total** | %.1f | %.1f | %.2f | | |%n", sortTotal, rdmaTotal,
                rdmaTotal / sortTotal));
        b.append("\n| all queries, per round | sort | rdma | rdma / sort |\n| --- | --- | --- | --- |\n");
        int rounds = (int) runs.stream().mapToInt(QueryRun::round).max().orElse(1);
        List<String> labels = List.of("shuffle written MB", "shuffle read MB (remote + local)", "fetch wait s",
                "executor CPU s", "GC s");
        List<java.util.function.ToDoubleFunction<QueryRun>> fs = List.of(r -> r.shuffleWritten() / 1e6,
                r -> (r.remoteRead() + r.localRead()) / 1e6, QueryRun::fetchWaitSeconds, QueryRun::executorCpuSeconds,
                QueryRun::gcSeconds);
        for (int i = 0; i < labels.size(); i++) {
            java.util.function.ToDoubleFunction<QueryRun> f = fs.get(i);
            double s = runs.stream().filter(r -> r.manager().equals("sort")).mapToDouble(f).sum() / rounds;
            double r = runs.stream().filter(x -> x.manager().equals("rdma")).mapToDouble(f).sum() / rounds;
            b.append(String.format(Locale.ROOT, "| %s | %.1f | %.1f | %.2f |%n", labels.get(i), s, r, r / s));
        }
        return b.toString();
    }

    private static void chart(List<String> names, List<QueryRun> runs, Path png) {
        DefaultCategoryDataset d = new DefaultCategoryDataset();
        for (String q : names) {
            d.addValue(median(runs, q, "sort"), "Spark sort shuffle", q);
            d.addValue(median(runs, q, "rdma"), "rdma-shuffle", q);
        }
        try {
            ChartUtils.saveChartAsPNG(png.toFile(), ChartFactory.createBarChart("TPC-DS query times (median)", null,
                    "seconds", d, PlotOrientation.VERTICAL, true, false, false), Math.max(800, names.size() * 24), 500);
        } catch (IOException | RuntimeException | Error e) {
            System.err.println("chart not written (" + e + "); install fontconfig and a font to get it");
        }
    }
}
