package org.rdmashuffle.shuffle;

import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.api.java.JavaPairRDD;
import scala.Tuple2;

/** Job pieces the Spark tests share. */
final class ShuffleJobs {
    private ShuffleJobs() {
    }

    /** groupByKey into {@code partitions}, as key → group size, in key order. */
    static Map<Integer, Integer> groupSizes(JavaPairRDD<Integer, String> d, int partitions) {
        Map<Integer, Integer> groups = new TreeMap<>();
        for (Tuple2<Integer, Iterable<String>> g : d.groupByKey(partitions).collect()) {
            int n = 0;
            for (String ignored : g._2()) {
                n++;
            }
            groups.put(g._1(), n);
        }
        return groups;
    }

    /** Every message in {@code e}'s cause chain, for asserting what a user would read. */
    static String messages(Throwable e) {
        StringBuilder b = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            b.append(t).append(" | ");
        }
        return b.toString();
    }
}
