package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Function;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Tuple2;

/**
 * Real Spark in local mode with rdma-shuffle as the shuffle manager: every block goes through the tcp
 * provider's one-sided READs (the node reads from itself over loopback), and each result equals the
 * same job on Spark's sort shuffle.
 */
class RdmaShuffleLocalModeTest {

    private static <T> T run(boolean rdma, Function<JavaSparkContext, T> job) {
        SparkConf conf = new SparkConf().setMaster("local[2]").setAppName("rdma-shuffle-local")
                .set("spark.ui.enabled", "false").set("spark.driver.host", "127.0.0.1")
                .set("spark.driver.bindAddress", "127.0.0.1")
                .set("spark.shuffle.rdma.provider", "tcp")
                .set("spark.shuffle.rdma.maxRegionSize", "64k"); // several regions per map output
        if (rdma) {
            conf.set("spark.shuffle.manager", RdmaShuffleManager.class.getName());
        }
        try (JavaSparkContext sc = new JavaSparkContext(conf)) {
            T result = job.apply(sc);
            if (rdma) {
                RdmaShuffleManager m = (RdmaShuffleManager) SparkEnv.get().shuffleManager();
                org.rdmashuffle.transport.NodeStats st = m.runtime().node.stats();
                assertTrue(st.readsCompleted() > 0 && st.bytesRead() > 0, "no READs: " + st);
                assertEquals(0, st.readsFailed(), st.toString());
                // Local mode: the only node reads from itself, so what it read is what it served.
                assertEquals(st.bytesRead(), st.bytesServed(), st.toString());
                assertEquals(0, m.runtime().pool.stats().inUseBuffers(), "receive buffers left in use");
            }
            return result;
        }
    }

    private static JavaPairRDD<Integer, String> data(JavaSparkContext sc) {
        List<Integer> xs = new ArrayList<>();
        for (int i = 0; i < 50_000; i++) {
            xs.add(i);
        }
        return sc.parallelize(xs, 6).mapToPair(i -> new Tuple2<>((i * 7919) % 1000, "v" + i));
    }

    @Test
    @Timeout(300)
    void shouldMatchSortShuffleWhenJobsShuffleThroughRdmaReads() {
        Function<JavaSparkContext, List<String>> job = sc -> {
            JavaPairRDD<Integer, String> d = data(sc);
            List<String> out = new ArrayList<>();
            Map<Integer, Integer> counts = new TreeMap<>(d.mapValues(v -> 1).reduceByKey(Integer::sum, 4).collectAsMap());
            out.add("reduceByKey " + counts);
            out.add("groupByKey " + ShuffleJobs.groupSizes(d, 5));
            List<Tuple2<Integer, String>> sorted = d.sortByKey(true, 3).take(20);
            out.add("sortByKey " + sorted.stream().map(t -> t._1()).toList());
            out.add("join " + d.join(d.mapValues(String::length), 4).count());
            out.add("distinct " + d.values().distinct(3).count());
            return out;
        };
        List<String> sortResult = run(false, job);
        List<String> rdmaResult = run(true, job);
        assertEquals(sortResult, rdmaResult);
        assertTrue(rdmaResult.get(4).endsWith(" 50000"), rdmaResult.get(4));
    }
}
