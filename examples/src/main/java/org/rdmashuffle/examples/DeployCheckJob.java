package org.rdmashuffle.examples;

import static org.apache.spark.sql.functions.col;
import static org.apache.spark.sql.functions.count;
import static org.apache.spark.sql.functions.lit;
import static org.apache.spark.sql.functions.pmod;
import static org.apache.spark.sql.functions.sum;

import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.IntStream;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.rdmashuffle.shuffle.RdmaShuffleManager;
import scala.Tuple2;

/**
 * A deployment check: run with {@code spark-submit} on a real cluster manager (the YARN test submits
 * it in client and in cluster deploy mode), it runs shuffles whose results it checks against values
 * computed on the driver without Spark — an RDD {@code groupByKey}, an RDD {@code sortByKey}, and
 * Spark SQL's aggregation and (sort-merge, broadcast disabled) join — and asks every executor for its
 * shuffle manager's READ counters before, between and after them. It writes what it found as a
 * properties file to {@code --result} (a path on the driver's machine), then fails the application
 * when a result was wrong or a shuffle read nothing with READs.
 *
 * <p>Options: {@code --result FILE} (required), {@code --records N} (300,000 of ~100 bytes for the RDD
 * shuffles, and the rows of the SQL ones), {@code --partitions P} (6), {@code --executors E} (what
 * {@code spark.executor.instances} says, else 2; the job waits for that many).
 *
 * <p>Keys written: {@code deployMode}, {@code driverShuffleManager}, {@code executors},
 * {@code groupByKey.expected|actual}, {@code sortByKey.expected|actual|ordered},
 * {@code sqlGroupBy.expected|actual}, {@code sqlJoin.expected|actual}, and for each executor
 * {@code executor.ID.shuffleManager|host|reads.rdd|reads.sql|readsServed|bytesRead} (READs it
 * completed during the RDD shuffles and during the SQL ones), the sums {@code reads.rdd} and
 * {@code reads.sql}, and {@code ok}.
 */
public final class DeployCheckJob {
    private DeployCheckJob() {
    }

    static int key(long i, int keys) {
        return (int) Math.floorMod(FaultJob.mix(i), (long) keys);
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (int i = 0; i < args.length; i += 2) {
            if (!Set.of("--result", "--records", "--partitions", "--executors").contains(args[i]) || i + 1 >= args.length) {
                throw new IllegalArgumentException("usage: --result FILE [--records N] [--partitions P] [--executors E]");
            }
            opts.put(args[i], args[i + 1]);
        }
        if (!opts.containsKey("--result")) {
            throw new IllegalArgumentException("--result FILE is required");
        }
        Path result = Path.of(opts.get("--result"));
        long records = Long.parseLong(opts.getOrDefault("--records", "300000"));
        int partitions = Integer.parseInt(opts.getOrDefault("--partitions", "6"));

        SparkSession spark = SparkSession.builder().appName("rdma-shuffle-deploy-check").getOrCreate();
        Properties out = new Properties();
        boolean ok;
        try {
            JavaSparkContext sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
            int executors = Integer.parseInt(opts.getOrDefault("--executors",
                    sc.getConf().get("spark.executor.instances", "2")));
            Cluster.waitForExecutors(sc.sc(), sc.master(), executors);
            out.setProperty("deployMode", sc.getConf().get("spark.submit.deployMode", "client"));
            out.setProperty("driverShuffleManager", SparkEnv.get().shuffleManager().getClass().getName());

            Map<String, Probe> start = probe(sc, executors);
            ok = rddShuffles(sc, records, partitions, out);
            Map<String, Probe> afterRdd = probe(sc, executors);
            ok &= sqlShuffles(spark, records, partitions, out);
            Map<String, Probe> afterSql = probe(sc, executors);

            out.setProperty("executors", String.join(",", afterSql.keySet()));
            long rddReads = 0;
            long sqlReads = 0;
            for (Probe p : afterSql.values()) {
                long r0 = start.containsKey(p.executorId) ? start.get(p.executorId).readsCompleted : 0;
                long r1 = afterRdd.containsKey(p.executorId) ? afterRdd.get(p.executorId).readsCompleted : 0;
                String k = "executor." + p.executorId + ".";
                out.setProperty(k + "shuffleManager", p.shuffleManager);
                out.setProperty(k + "host", p.host);
                out.setProperty(k + "reads.rdd", Long.toString(r1 - r0));
                out.setProperty(k + "reads.sql", Long.toString(p.readsCompleted - r1));
                out.setProperty(k + "readsServed", Long.toString(p.readsServed));
                out.setProperty(k + "bytesRead", Long.toString(p.bytesRead));
                rddReads += r1 - r0;
                sqlReads += p.readsCompleted - r1;
            }
            out.setProperty("reads.rdd", Long.toString(rddReads));
            out.setProperty("reads.sql", Long.toString(sqlReads));
            ok &= rddReads > 0 && sqlReads > 0;
            // Before stopping: a launcher sees the application end when the context stops (in client mode
            // too), and whoever waits on it must find the result there.
            write(result, out, ok);
        } catch (RuntimeException | Error e) {
            out.setProperty("error", e.toString());
            write(result, out, false);
            throw e;
        } finally {
            spark.stop();
        }
        System.out.println("deploy check " + (ok ? "passed" : "FAILED") + ": " + new TreeMap<>(out));
        if (!ok) {
            throw new IllegalStateException("deploy check failed; see " + result);
        }
    }

    /** Writes the properties (and {@code ok}) whole: to a temporary file first, then moved in place. */
    private static void write(Path result, Properties out, boolean ok) throws IOException {
        out.setProperty("ok", Boolean.toString(ok));
        Path parent = result.toAbsolutePath().getParent();
        Files.createDirectories(parent);
        Path tmp = Files.createTempFile(parent, result.getFileName().toString(), ".tmp");
        try (Writer w = Files.newBufferedWriter(tmp, StandardCharsets.UTF_8)) {
            new TreeMap<>(out).forEach((k, v) -> {
                try {
                    w.write(k + "=" + v.toString().replace("\\", "\\\\").replace("\n", "\\n") + "\n");
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
        }
        Files.move(tmp, result, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    /** groupByKey and sortByKey of generated records, each checked by digest against the driver's own. */
    private static boolean rddShuffles(JavaSparkContext sc, long records, int partitions, Properties out) {
        int keys = (int) Math.max(1, records / 10);
        int maps = partitions;
        long perMap = (records + maps - 1) / maps;
        List<Integer> mapIds = IntStream.range(0, maps).boxed().toList();

        // groupByKey: per key, the count and the sum of its records' hashes; the digest over all keys.
        Map<Integer, long[]> groups = new HashMap<>();
        FaultJob.Digest sortExpected = new FaultJob.Digest(0, 0, 0);
        for (long i = 0; i < records; i++) {
            int k = key(i, keys);
            long h = FaultJob.hash(k, FaultJob.value(i));
            long[] g = groups.computeIfAbsent(k, x -> new long[2]);
            g[0]++;
            g[1] += h;
            long sh = FaultJob.hash((int) FaultJob.mix(i), FaultJob.value(i));
            sortExpected = sortExpected.plus(new FaultJob.Digest(1, sh, sh));
        }
        FaultJob.Digest groupExpected = new FaultJob.Digest(0, 0, 0);
        for (Map.Entry<Integer, long[]> e : groups.entrySet()) {
            long d = groupDigest(e.getKey(), e.getValue()[0], e.getValue()[1]);
            groupExpected = groupExpected.plus(new FaultJob.Digest(1, d, d));
        }
        JavaPairRDD<Integer, byte[]> pairs = sc.parallelize(mapIds, maps).flatMapToPair(m -> {
            List<Tuple2<Integer, byte[]>> recs = new ArrayList<>();
            for (long i = m * perMap; i < Math.min(records, (m + 1) * perMap); i++) {
                recs.add(new Tuple2<>(key(i, keys), FaultJob.value(i)));
            }
            return recs.iterator();
        });
        FaultJob.Digest grouped = pairs.groupByKey(partitions).map(kv -> {
            long n = 0;
            long sum = 0;
            for (byte[] v : kv._2()) {
                n++;
                sum += FaultJob.hash(kv._1(), v);
            }
            long d = groupDigest(kv._1(), n, sum);
            return new FaultJob.Digest(1, d, d);
        }).fold(new FaultJob.Digest(0, 0, 0), FaultJob.Digest::plus);
        out.setProperty("groupByKey.expected", groupExpected.toString());
        out.setProperty("groupByKey.actual", grouped.toString());

        // sortByKey on 32-bit keys: every partition sorted, partitions in order, the same records.
        List<long[]> parts = sc.parallelize(mapIds, maps).flatMapToPair(m -> {
            List<Tuple2<Integer, byte[]>> recs = new ArrayList<>();
            for (long i = m * perMap; i < Math.min(records, (m + 1) * perMap); i++) {
                recs.add(new Tuple2<>((int) FaultJob.mix(i), FaultJob.value(i)));
            }
            return recs.iterator();
        }).sortByKey(true, partitions).mapPartitionsWithIndex((index, it) -> {
            long n = 0;
            long sum = 0;
            long xor = 0;
            long first = 0;
            long last = Long.MIN_VALUE;
            boolean sorted = true;
            while (it.hasNext()) {
                Tuple2<Integer, byte[]> r = it.next();
                sorted &= r._1() >= last;
                if (n == 0) {
                    first = r._1();
                }
                last = r._1();
                long h = FaultJob.hash(r._1(), r._2());
                n++;
                sum += h;
                xor ^= h;
            }
            return List.of(new long[] {index, n, sum, xor, first, last, sorted ? 1 : 0}).iterator();
        }, true).collect();
        FaultJob.Digest sortedDigest = new FaultJob.Digest(0, 0, 0);
        boolean ordered = true;
        long previousLast = Long.MIN_VALUE;
        for (long[] p : parts.stream().sorted((a, b) -> Long.compare(a[0], b[0])).toList()) {
            sortedDigest = sortedDigest.plus(new FaultJob.Digest(p[1], p[2], p[3]));
            ordered &= p[6] == 1;
            if (p[1] > 0) {
                ordered &= p[4] >= previousLast;
                previousLast = p[5];
            }
        }
        out.setProperty("sortByKey.expected", sortExpected.toString());
        out.setProperty("sortByKey.actual", sortedDigest.toString());
        out.setProperty("sortByKey.ordered", Boolean.toString(ordered));
        return grouped.equals(groupExpected) && sortedDigest.equals(sortExpected) && ordered;
    }

    static long groupDigest(int key, long count, long sum) {
        return FaultJob.mix(FaultJob.mix(key) ^ FaultJob.mix(sum + count));
    }

    /**
     * Spark SQL (adaptive execution on, broadcast joins off so the join shuffles both sides): an
     * aggregation, and a join followed by an aggregation, each compared row for row with the driver's
     * arithmetic.
     */
    private static boolean sqlShuffles(SparkSession spark, long rows, int partitions, Properties out) {
        spark.conf().set("spark.sql.autoBroadcastJoinThreshold", "-1");
        spark.conf().set("spark.sql.shuffle.partitions", Integer.toString(partitions + 2));
        int groups = 1000;
        int joinKeys = 5000;
        int buckets = 64;

        // SELECT id % 1000 AS k, count(*), sum(id) FROM range(rows) GROUP BY k
        Map<Long, List<Long>> groupExpected = new TreeMap<>();
        for (long id = 0; id < rows; id++) {
            List<Long> g = groupExpected.computeIfAbsent(id % groups, x -> new ArrayList<>(List.of(0L, 0L)));
            g.set(0, g.get(0) + 1);
            g.set(1, g.get(1) + id);
        }
        Map<Long, List<Long>> groupActual = new TreeMap<>();
        for (Row r : spark.range(0, rows, 1, partitions).withColumn("k", pmod(col("id"), lit(groups)))
                .groupBy("k").agg(count(lit(1)), sum("id")).collectAsList()) {
            groupActual.put(r.getLong(0), List.of(r.getLong(1), r.getLong(2)));
        }
        out.setProperty("sqlGroupBy.expected", digestOf(groupExpected));
        out.setProperty("sqlGroupBy.actual", digestOf(groupActual));

        // left: range(rows), k = id % 5000; right: range(10000), k = id % 5000 (two rows per key);
        // join on k, then per bucket k % 64: count(*), sum(a), sum(b).
        Map<Long, List<Long>> joinExpected = new TreeMap<>();
        for (long id = 0; id < rows; id++) {
            long k = id % joinKeys;
            List<Long> g = joinExpected.computeIfAbsent(k % buckets, x -> new ArrayList<>(List.of(0L, 0L, 0L)));
            g.set(0, g.get(0) + 2);
            g.set(1, g.get(1) + 2 * id);
            g.set(2, g.get(2) + 2 * k + joinKeys);
        }
        Dataset<Row> left = spark.range(0, rows, 1, partitions)
                .select(pmod(col("id"), lit(joinKeys)).as("k"), col("id").as("a"));
        Dataset<Row> right = spark.range(0, 2L * joinKeys, 1, partitions)
                .select(pmod(col("id"), lit(joinKeys)).as("k"), col("id").as("b"));
        Map<Long, List<Long>> joinActual = new TreeMap<>();
        for (Row r : left.join(right, "k").groupBy(pmod(col("k"), lit(buckets)).as("bucket"))
                .agg(count(lit(1)), sum("a"), sum("b")).collectAsList()) {
            joinActual.put(r.getLong(0), List.of(r.getLong(1), r.getLong(2), r.getLong(3)));
        }
        out.setProperty("sqlJoin.expected", digestOf(joinExpected));
        out.setProperty("sqlJoin.actual", digestOf(joinActual));
        return groupExpected.equals(groupActual) && joinExpected.equals(joinActual);
    }

    /** Rows, then the sums of every column and a hash of all of them in key order: short enough to compare. */
    static String digestOf(Map<Long, List<Long>> rows) {
        long h = 0;
        long[] sums = new long[rows.isEmpty() ? 0 : rows.values().iterator().next().size()];
        for (Map.Entry<Long, List<Long>> e : rows.entrySet()) {
            h = FaultJob.mix(h ^ e.getKey());
            for (int c = 0; c < e.getValue().size(); c++) {
                sums[c] += e.getValue().get(c);
                h = FaultJob.mix(h ^ e.getValue().get(c));
            }
        }
        return "rows=" + rows.size() + " sums=" + java.util.Arrays.toString(sums) + " hash=" + Long.toHexString(h);
    }

    /** One executor's answer: its id, host, shuffle manager and transport counters. */
    record Probe(String executorId, String host, String shuffleManager, long readsCompleted, long readsServed,
                 long bytesRead) {
        String encode() {
            return String.join("\t", executorId, host, shuffleManager, Long.toString(readsCompleted),
                    Long.toString(readsServed), Long.toString(bytesRead));
        }

        static Probe decode(String line) {
            String[] f = line.split("\t");
            return new Probe(f[0], f[1], f[2], Long.parseLong(f[3]), Long.parseLong(f[4]), Long.parseLong(f[5]));
        }

        static Probe take() {
            SparkEnv env = SparkEnv.get();
            long reads = -1;
            long served = -1;
            long bytes = -1;
            String manager = env.shuffleManager().getClass().getName();
            if (env.shuffleManager() instanceof RdmaShuffleManager m && m.executorStats().isPresent()) {
                RdmaShuffleManager.ExecutorStats s = m.executorStats().get();
                reads = s.node().readsCompleted();
                served = s.node().readsServed();
                bytes = s.node().bytesRead();
            } else if (env.shuffleManager() instanceof RdmaShuffleManager) {
                manager += " (no transport: fell back to sort)";
            }
            return new Probe(env.executorId(), env.blockManager().blockManagerId().host(), manager, reads, served,
                    bytes);
        }
    }

    /** Every executor's probe (tasks are spread over many partitions until each executor has answered). */
    static Map<String, Probe> probe(JavaSparkContext sc, int executors) {
        Map<String, Probe> byExecutor = new TreeMap<>();
        for (int round = 0; round < 20 && byExecutor.size() < executors; round++) {
            List<Integer> slots = IntStream.range(0, 8 * executors).boxed().toList();
            for (String line : sc.parallelize(slots, slots.size())
                    .mapPartitions(it -> List.of(Probe.take().encode()).iterator()).collect()) {
                Probe p = Probe.decode(line);
                byExecutor.put(p.executorId(), p);
            }
        }
        if (byExecutor.size() < executors) {
            throw new IllegalStateException("probe reached only executors " + byExecutor.keySet());
        }
        return byExecutor;
    }
}
