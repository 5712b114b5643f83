package org.rdmashuffle.examples;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.TimeoutException;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;

/**
 * The main job: TeraSort on an embedded {@code local-cluster} (separate executor JVMs, so blocks
 * cross processes) under Spark's sort shuffle and under rdma-shuffle, alternately (A B A B …), each
 * run validated (global order, record count, checksum equal to the generated data's) and the two
 * managers' outputs compared partition by partition. Prints one row per run and the medians with
 * their ratio, and writes them as CSV and Markdown to the output folder.
 *
 * <p>{@code --workload tpcds} runs {@link TpcdsComparison} instead, with its options.
 * Options: {@code --records N} (default 1,000,000 × 100 bytes), {@code --partitions P} (8),
 * {@code --rounds R} (2), {@code --master URL} (local-cluster[2,1,1024]), {@code --executors N}
 * (on another master: wait for that many executors first), {@code --jars a.jar,b.jar}
 * (what executors load: this module's jar and rdma-shuffle's), {@code --out DIR}; any
 * {@code --conf k=v} is set on both managers' runs.
 */
public final class ShuffleComparison {
    private ShuffleComparison() {
    }

    public static void main(String[] args) throws Exception {
        List<String> all = new ArrayList<>(List.of(args));
        int w = all.indexOf("--workload");
        if (w >= 0) {
            if (w + 1 >= all.size()) {
                usage("missing value for --workload");
            }
            String workload = all.remove(w + 1);
            all.remove(w);
            args = all.toArray(new String[0]);
            switch (workload) {
                case "terasort" -> { }
                case "tpcds" -> {
                    TpcdsComparison.main(args);
                    return;
                }
                default -> usage("unknown workload " + workload + "; accepted: terasort, tpcds");
            }
        }
        Cluster.Options o = null;
        long records = 0;
        int partitions = 0;
        try {
            o = Cluster.Options.parse(args, 2, "local-cluster[2,1,1024]", Set.of("--records", "--partitions"));
            records = Long.parseLong(o.get("--records", "1000000"));
            partitions = Integer.parseInt(o.get("--partitions", "8"));
        } catch (IllegalArgumentException e) {
            usage(e.getMessage());
        }
        if (records <= 0 || partitions <= 0) {
            usage("--records and --partitions must be positive");
        }
        System.out.printf(Locale.ROOT, "TeraSort of %,d records (%,d MB) in %d partitions on %s, %d round(s) of "
                + "sort shuffle vs rdma-shuffle%n", records, records * 100 / 1_000_000, partitions, o.master, o.rounds);
        List<ComparisonReport.Run> runs = new ArrayList<>();
        List<List<String>> outputs = new ArrayList<>();
        System.out.println(ComparisonReport.header());
        for (int r = 1; r <= o.rounds; r++) {
            for (boolean rdma : new boolean[] {false, true}) {
                List<String> output = new ArrayList<>();
                ComparisonReport.Run run = runOnce(r, rdma, o.master, o.executors, o.jars, o.conf, records, partitions,
                        output);
                runs.add(run);
                outputs.add(output);
                System.out.println(ComparisonReport.row(run));
            }
        }
        for (int i = 1; i < runs.size(); i++) {
            if (!outputs.get(i).equals(outputs.get(0))) {
                throw new IllegalStateException("round " + runs.get(i).round() + " on " + runs.get(i).manager()
                        + " sorted into different partitions than round 1 on sort shuffle");
            }
        }
        ComparisonReport report = new ComparisonReport("terasort", runs);
        System.out.println();
        System.out.println(report.markdown());
        String problem = report.writeTo(o.out);
        if (!problem.isEmpty()) {
            System.err.println(problem);
        }
        System.out.println("results identical across managers; Markdown, CSV, JSON and chart in "
                + o.out.toAbsolutePath());
    }

    private static void usage(String problem) {
        System.err.println(problem);
        System.err.println("usage: ShuffleComparison [--workload terasort|tpcds] [--records N] [--partitions P] "
                + "[--rounds R] [--master URL] [--executors N] [--jars a.jar,b.jar] [--out DIR] [--conf key=value]...");
        System.exit(2);
    }

    private static ComparisonReport.Run runOnce(int round, boolean rdma, String master, int executors, String jars,
                                                List<String[]> extra, long records, int partitions,
                                                List<String> output) throws TimeoutException {
        SparkConf conf = TeraSort.kryo(new SparkConf().setMaster(master)
                .setAppName("terasort-" + (rdma ? "rdma" : "sort"))
                .set("spark.ui.enabled", "false")
                .set("spark.executor.memory", "1g"));
        Cluster.configure(conf, rdma, jars, extra);
        String manager = rdma ? "rdma" : "sort";
        try (JavaSparkContext sc = new JavaSparkContext(conf)) {
            Cluster.waitForExecutors(sc.sc(), master, executors);
            StageRecorder recorder = new StageRecorder();
            sc.sc().addSparkListener(recorder);
            long seed = 42;
            long expectedChecksum = TeraRecords.generate(sc, records, partitions, seed)
                    .map(t -> TeraRecords.crc(t._1(), t._2())).reduce(Long::sum);
            sc.sc().listenerBus().waitUntilEmpty(30_000);
            int firstStage = recorder.stages.size();
            long t0 = System.nanoTime();
            JavaPairRDD<byte[], byte[]> sorted = TeraRecords.generate(sc, records, partitions, seed)
                    .sortByKey(new TeraRecords.KeyOrder(), true, partitions);
            List<TeraRecords.PartitionDigest> digests = sorted
                    .mapPartitionsWithIndex((i, it) -> List.of(TeraRecords.PartitionDigest.of(i, it)).iterator(), true)
                    .collect();
            double jobSeconds = (System.nanoTime() - t0) / 1e9;
            List<String> problems = TeraRecords.validate(digests, records, expectedChecksum);
            if (!problems.isEmpty()) {
                throw new IllegalStateException("TeraValidate failed on " + manager + ": " + problems);
            }
            sc.sc().listenerBus().waitUntilEmpty(30_000);
            List<StageRecorder.Stage> stages = recorder.stages.subList(firstStage, recorder.stages.size());
            StageRecorder.Stage reduce = stages.stream().filter(StageRecorder.Stage::readsShuffle)
                    .reduce((a, b) -> b).orElseThrow(() -> new IllegalStateException("no stage read a shuffle"));
            long written = stages.stream().mapToLong(StageRecorder.Stage::bytesWritten).sum();
            long cpu = stages.stream().mapToLong(StageRecorder.Stage::executorCpuMs).sum();
            long gc = stages.stream().mapToLong(StageRecorder.Stage::gcMs).sum();
            digests.forEach(d -> output.add(d.summary()));
            return new ComparisonReport.Run(round, manager, jobSeconds, reduce.durationMs() / 1e3, written,
                    reduce.remoteBytesRead(), reduce.localBytesRead(), reduce.fetchWaitMs() / 1e3, cpu / 1e3,
                    gc / 1e3);
        }
    }

}
