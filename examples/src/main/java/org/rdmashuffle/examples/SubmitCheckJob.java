package org.rdmashuffle.examples;

import java.io.Serializable;
import java.lang.management.ManagementFactory;
import java.lang.reflect.Method;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.CodeSource;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkEnv;
import org.apache.spark.SparkExecutorInfo;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import scala.Tuple2;

/**
 * A job for {@code spark-submit} in any deploy mode (standalone client or cluster, YARN, ...): it takes
 * its master, deploy mode and shuffle manager from what {@code spark-submit} set, runs a shuffle-heavy
 * RDD job and a SQL job, and writes one JSON object describing what happened to a result file, so a
 * script outside the cluster can check it (the file must be on a filesystem the script can read; in
 * cluster mode the driver runs on a Worker, so give an absolute path there).
 *
 * <p>Usage: {@code SubmitCheckJob RESULT.json [records (1000000)] [executors (2)] [sqlRows (1000000)]}.
 *
 * <p>What the result holds:
 * <ul>
 * <li>{@code rdd}: a {@code partitionBy} of {@code records} deterministic records (~100 bytes) into 16
 * partitions; the order-independent digest (count, sum, xor of a 64-bit hash of each record) of what
 * the reduce side received, against the digest the driver computed without a shuffle, and one digest
 * per reduce partition (so two runs under different shuffle managers can be compared record for
 * record, partition by partition);</li>
 * <li>{@code sql}: SHA-256 over the sorted rows of a join + aggregation + ORDER BY over
 * {@code sqlRows} generated rows (broadcast joins off, so every operator shuffles);</li>
 * <li>{@code driver}: where the driver ran, its shuffle manager's class, class loader and jar (to see
 * that a manager delivered by {@code --jars} was loaded, and from where);</li>
 * <li>{@code executors}: for each executor its host and, when it runs rdma-shuffle, its
 * {@code executorStats()} counters after each job (READs completed, bytes read). The plugin is only
 * reached by reflection, so the job runs under any shuffle manager.</li>
 * </ul>
 * Exit code 0 when the RDD digest is right, 3 when it is not (the driver then fails, which a
 * cluster-mode Master records as the driver's state).
 */
public final class SubmitCheckJob {
    private SubmitCheckJob() {
    }

    static final int MAPS = 8;
    static final int PARTITIONS = 16;

    /** What one executor reports about itself. */
    record Probe(String executorId, String host, String managerClass, String managerLoader, boolean rdmaStats,
                 long readsCompleted, long bytesRead, long readsServed) implements Serializable {
        private static final long serialVersionUID = 1L;

        static Probe take() {
            SparkEnv env = SparkEnv.get();
            Object m = env.shuffleManager();
            long reads = 0;
            long bytes = 0;
            long served = 0;
            boolean has = false;
            try {
                Method stats = m.getClass().getMethod("executorStats");
                Optional<?> s = (Optional<?>) stats.invoke(m);
                if (s.isPresent()) {
                    Object node = s.get().getClass().getMethod("node").invoke(s.get());
                    reads = (Long) node.getClass().getMethod("readsCompleted").invoke(node);
                    bytes = (Long) node.getClass().getMethod("bytesRead").invoke(node);
                    served = (Long) node.getClass().getMethod("readsServed").invoke(node);
                    has = true;
                }
            } catch (NoSuchMethodException e) {
                // not rdma-shuffle
            } catch (ReflectiveOperationException e) {
                throw new IllegalStateException(e);
            }
            return new Probe(env.executorId(), env.blockManager().blockManagerId().host(), m.getClass().getName(),
                    String.valueOf(m.getClass().getClassLoader()), has, reads, bytes, served);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: SubmitCheckJob RESULT.json [records] [executors] [sqlRows]");
            System.exit(2);
        }
        Path result = Path.of(args[0]);
        long records = args.length > 1 ? Long.parseLong(args[1]) : 1_000_000L;
        int executors = args.length > 2 ? Integer.parseInt(args[2]) : 2;
        long sqlRows = args.length > 3 ? Long.parseLong(args[3]) : 1_000_000L;

        FaultJob.Digest expected = new FaultJob.Digest(0, 0, 0);
        for (long i = 0; i < records; i++) {
            long h = FaultJob.hash(FaultJob.key(i), FaultJob.value(i));
            expected = new FaultJob.Digest(expected.count() + 1, expected.sum() + h, expected.xor() ^ h);
        }

        long start = System.currentTimeMillis();
        SparkSession spark = SparkSession.builder().appName("rdma-shuffle-submit-check").getOrCreate();
        JavaSparkContext sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
        StringBuilder json = new StringBuilder("{");
        int exit = 0;
        try {
            waitForExecutors(sc, executors);
            long registered = System.currentTimeMillis();
            json.append(field("manager", sc.getConf().get("spark.shuffle.manager", "sort"))).append(',')
                    .append(field("deployMode", sc.getConf().get("spark.submit.deployMode", "client"))).append(',')
                    .append(field("master", sc.master())).append(',')
                    .append(field("appId", sc.sc().applicationId())).append(',')
                    .append("\"driver\":").append(driverInfo(sc)).append(',');

            // The shuffle-heavy RDD job.
            long t0 = System.currentTimeMillis();
            long perMap = (records + MAPS - 1) / MAPS;
            List<Integer> mapIds = new ArrayList<>();
            for (int m = 0; m < MAPS; m++) {
                mapIds.add(m);
            }
            List<Tuple2<Integer, FaultJob.Digest>> parts = sc.parallelize(mapIds, MAPS).flatMapToPair(m -> {
                long from = m * perMap;
                long to = Math.min(records, from + perMap);
                List<Tuple2<Integer, byte[]>> out = new ArrayList<>();
                for (long i = from; i < to; i++) {
                    out.add(new Tuple2<>(FaultJob.key(i), FaultJob.value(i)));
                }
                return out.iterator();
            }).partitionBy(new HashPartitioner(PARTITIONS)).mapPartitionsWithIndex((p, it) -> {
                long n = 0;
                long sum = 0;
                long xor = 0;
                while (it.hasNext()) {
                    Tuple2<Integer, byte[]> r = it.next();
                    long h = FaultJob.hash(r._1(), r._2());
                    n++;
                    sum += h;
                    xor ^= h;
                }
                return List.of(new Tuple2<>(p, new FaultJob.Digest(n, sum, xor))).iterator();
            }, false).collect();
            long t1 = System.currentTimeMillis();
            Map<Integer, FaultJob.Digest> byPartition = new TreeMap<>();
            FaultJob.Digest got = new FaultJob.Digest(0, 0, 0);
            for (Tuple2<Integer, FaultJob.Digest> t : parts) {
                byPartition.put(t._1(), t._2());
                got = got.plus(t._2());
            }
            boolean rddOk = got.equals(expected);
            if (!rddOk) {
                exit = 3;
            }
            List<Probe> afterRdd = probeAll(sc);

            // The SQL job: join + aggregate + order, every operator shuffling.
            long t2 = System.currentTimeMillis();
            spark.conf().set("spark.sql.autoBroadcastJoinThreshold", "-1");
            spark.conf().set("spark.sql.shuffle.partitions", "12");
            spark.range(0, sqlRows, 1, MAPS).selectExpr("id", "id % 5000 AS k", "(id * 7919) % 1000003 AS v",
                    "CAST(id % 97 AS STRING) AS s").createOrReplaceTempView("fact");
            spark.range(0, 5000, 1, 4).selectExpr("id AS k", "concat('name', id % 123) AS name")
                    .createOrReplaceTempView("dim");
            List<Row> rows = spark.sql("SELECT d.name, count(*) AS n, sum(f.v) AS total, max(f.v) AS top, "
                    + "count(DISTINCT f.s) AS distinct_s FROM fact f JOIN dim d ON f.k = d.k "
                    + "GROUP BY d.name ORDER BY d.name").collectAsList();
            long t3 = System.currentTimeMillis();
            MessageDigest sha = MessageDigest.getInstance("SHA-256");
            for (Row r : rows) {
                sha.update((r.mkString("|") + "\n").getBytes(StandardCharsets.UTF_8));
            }
            String sqlSha = HexFormat.of().formatHex(sha.digest());
            List<Probe> afterSql = probeAll(sc);

            json.append("\"rdd\":{").append(field("ok", rddOk)).append(',').append(field("records", records))
                    .append(',').append(field("expected", expected.toString())).append(',')
                    .append(field("got", got.toString())).append(',').append(field("ms", t1 - t0))
                    .append(",\"partitions\":[");
            String sep = "";
            for (Map.Entry<Integer, FaultJob.Digest> e : byPartition.entrySet()) {
                json.append(sep).append('"').append(e.getKey()).append(':').append(e.getValue()).append('"');
                sep = ",";
            }
            json.append("]},\"sql\":{").append(field("rows", rows.size())).append(',')
                    .append(field("sha256", sqlSha)).append(',').append(field("ms", t3 - t2)).append("},")
                    .append("\"executorsAfterRdd\":").append(probesJson(afterRdd)).append(',')
                    .append("\"executors\":").append(probesJson(afterSql)).append(',')
                    .append(field("waitForExecutorsMs", registered - start)).append(',');
        } catch (Exception e) {
            exit = 4;
            json.append(field("error", e.toString())).append(',');
            e.printStackTrace();
        }
        json.append(field("exit", exit)).append("}\n");
        Files.writeString(result, json.toString(), StandardCharsets.UTF_8);
        System.out.print(json);
        spark.stop();
        if (exit != 0) {
            System.exit(exit);
        }
    }

    static void waitForExecutors(JavaSparkContext sc, int executors) throws InterruptedException {
        long deadline = System.nanoTime() + 180_000_000_000L;
        while (sc.sc().statusTracker().getExecutorInfos().length < executors + 1) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException(executors + " executors did not register within 180 s");
            }
            Thread.sleep(200);
        }
    }

    /** Runs small probe jobs until every registered executor has answered once (each keeps its last answer). */
    static List<Probe> probeAll(JavaSparkContext sc) throws InterruptedException {
        List<String> want = new ArrayList<>();
        for (SparkExecutorInfo i : sc.sc().statusTracker().getExecutorInfos()) {
            // the driver is listed too: size() - 1 executors to hear from
            want.add(i.host() + ":" + i.port());
        }
        Map<String, Probe> seen = new TreeMap<>();
        int tasks = 8 * Math.max(1, want.size());
        for (int round = 0; round < 30 && seen.size() < want.size() - 1; round++) {
            List<Integer> ids = new ArrayList<>();
            for (int i = 0; i < tasks; i++) {
                ids.add(i);
            }
            for (Probe p : sc.parallelize(ids, tasks).map(i -> {
                Thread.sleep(50);
                return Probe.take();
            }).collect()) {
                seen.put(p.executorId(), p);
            }
        }
        return new ArrayList<>(seen.values());
    }

    static String driverInfo(JavaSparkContext sc) {
        Object m = SparkEnv.get().shuffleManager();
        CodeSource cs = m.getClass().getProtectionDomain().getCodeSource();
        URL jar = cs == null ? null : cs.getLocation();
        long opens = ManagementFactory.getRuntimeMXBean().getInputArguments().stream()
                .filter(a -> a.startsWith("--add-opens")).count();
        String command = System.getProperty("sun.java.command", "");
        return "{" + field("host", sc.getConf().get("spark.driver.host", "?")) + ','
                + field("mainClass", command.split(" ")[0]) + ','
                + field("managerClass", m.getClass().getName()) + ','
                + field("managerLoader", String.valueOf(m.getClass().getClassLoader())) + ','
                + field("managerJar", String.valueOf(jar)) + ','
                + field("contextLoader", String.valueOf(Thread.currentThread().getContextClassLoader())) + ','
                + field("addOpensArgs", opens) + ','
                + field("envSparkLocalIp", String.valueOf(System.getenv("SPARK_LOCAL_IP"))) + ','
                + field("cwd", Path.of("").toAbsolutePath().toString()) + "}";
    }

    static String probesJson(List<Probe> probes) {
        StringBuilder b = new StringBuilder("[");
        String sep = "";
        for (Probe p : probes) {
            b.append(sep).append('{').append(field("id", p.executorId())).append(',').append(field("host", p.host()))
                    .append(',').append(field("managerClass", p.managerClass())).append(',')
                    .append(field("managerLoader", p.managerLoader())).append(',')
                    .append(field("rdmaStats", p.rdmaStats())).append(',')
                    .append(field("readsCompleted", p.readsCompleted())).append(',')
                    .append(field("bytesRead", p.bytesRead())).append(',')
                    .append(field("readsServed", p.readsServed())).append('}');
            sep = ",";
        }
        return b.append(']').toString();
    }

    static String field(String name, Object value) {
        if (value instanceof Number || value instanceof Boolean) {
            return "\"" + name + "\":" + value;
        }
        String s = String.valueOf(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n");
        return String.format(Locale.ROOT, "\"%s\":\"%s\"", name, s);
    }
}
