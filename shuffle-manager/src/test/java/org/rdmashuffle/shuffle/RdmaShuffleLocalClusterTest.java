package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.File;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Function;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Tuple2;

/**
 * Real Spark in {@code local-cluster[2,1,1024]}: two executor JVMs, so blocks cross processes over
 * the tcp provider's one-sided READs. Each result equals the same job on Spark's sort shuffle.
 */
class RdmaShuffleLocalClusterTest {

    private static <T> T run(boolean rdma, Function<JavaSparkContext, T> job) {
        SparkConf conf = new SparkConf().setMaster("local-cluster[2,1,1024]").setAppName("rdma-shuffle-cluster")
                .set("spark.ui.enabled", "false").set("spark.driver.host", "127.0.0.1")
                .set("spark.driver.bindAddress", "127.0.0.1")
                .set("spark.executor.extraClassPath", System.getProperty("rdma.test.classpath"))
                .set("spark.shuffle.rdma.provider", "tcp")
                .set("spark.shuffle.rdma.maxRegionSize", "64k");
        if (rdma) {
            conf.set("spark.shuffle.manager", RdmaShuffleManager.class.getName());
        }
        try (JavaSparkContext sc = new JavaSparkContext(conf)) {
            // Fail fast when executors cannot start (a standalone master would relaunch them forever).
            long deadline = System.nanoTime() + 90_000_000_000L;
            while (sc.sc().getExecutorMemoryStatus().size() < 3) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("executors did not register within 90 s; see "
                            + System.getenv("SPARK_HOME") + "/work/*/*/stderr");
                }
                try {
                    Thread.sleep(200);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new AssertionError(e);
                }
            }
            return job.apply(sc);
        }
    }

    @Test
    @Timeout(400)
    void shouldMatchSortShuffleWhenBlocksCrossExecutorJvms() {
        String home = System.getenv("SPARK_HOME");
        assumeTrue(home != null && new File(home, "jars").isDirectory(),
                "SPARK_HOME with Spark's jars/ is missing (the build assembles it under shuffle-manager/target)");
        Function<JavaSparkContext, List<String>> job = sc -> {
            List<Integer> xs = new ArrayList<>();
            for (int i = 0; i < 200_000; i++) {
                xs.add(i);
            }
            JavaPairRDD<Integer, String> d = sc.parallelize(xs, 8).mapToPair(i -> new Tuple2<>((i * 7919) % 5000, "v" + i));
            List<String> out = new ArrayList<>();
            out.add("reduceByKey " + new TreeMap<>(d.mapValues(v -> 1).reduceByKey(Integer::sum, 6).collectAsMap()));
            out.add("groupByKey " + ShuffleJobs.groupSizes(d, 7));
            out.add("sortByKey " + d.sortByKey(true, 5).keys().collect().hashCode());
            out.add("join " + d.join(d.mapValues(String::length), 4).count());
            out.add("repartition " + d.repartition(9).count());
            return out;
        };
        List<String> sortResult = run(false, job);
        List<String> rdmaResult = run(true, job);
        assertEquals(sortResult, rdmaResult);
        assertTrue(rdmaResult.get(4).endsWith(" 200000"), rdmaResult.get(4));
    }
}
