package org.rdmashuffle.shuffle;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import scala.Tuple2;

/** Job pieces the Spark tests share; every result is in a canonical, comparable form. */
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

    /** {@code records} pairs over {@code maps} partitions: key {@code (i * 7919) % keys}, value "v" + i. */
    static JavaPairRDD<Integer, String> pairs(JavaSparkContext sc, int records, int maps, int keys) {
        List<Integer> xs = new ArrayList<>(records);
        for (int i = 0; i < records; i++) {
            xs.add(i);
        }
        return sc.parallelize(xs, maps).mapToPair(i -> new Tuple2<>((int) ((i * 7919L) % keys), "v" + i));
    }

    /** An order-independent digest of strings. */
    static long digest(Iterable<String> values) {
        long h = 0;
        for (String v : values) {
            h += v.hashCode() * 0x9E3779B97F4A7C15L + v.length();
        }
        return h;
    }

    /**
     * groupByKey, reduceByKey, aggregateByKey, sortByKey, join, cogroup, repartition and distinct
     * over the same data, each reduced to a canonical string.
     */
    static List<String> operations(JavaSparkContext sc) {
        JavaPairRDD<Integer, String> d = pairs(sc, 60_000, 8, 3_000);
        JavaPairRDD<Integer, Integer> lengths = d.mapValues(String::length);
        List<String> out = new ArrayList<>();
        out.add("groupByKey " + new TreeMap<>(d.groupByKey(7).mapValues(ShuffleJobs::digest).collectAsMap()));
        out.add("reduceByKey " + new TreeMap<>(lengths.reduceByKey(Integer::sum, 6).collectAsMap()));
        out.add("aggregateByKey " + new TreeMap<>(d.aggregateByKey(0L, 5, (acc, v) -> acc + v.hashCode(),
                Long::sum).collectAsMap()));
        List<Integer> keys = d.sortByKey(false, 5).keys().collect();
        out.add("sortByKey " + keys.size() + " " + keys.hashCode());
        out.add("join " + new TreeMap<>(d.join(lengths.filter(t -> t._1() % 3 == 0), 4)
                .mapValues(t -> (long) t._1().length() * t._2()).reduceByKey(Long::sum, 3).collectAsMap()));
        out.add("cogroup " + new TreeMap<>(d.cogroup(lengths.filter(t -> t._1() % 2 == 0), 3)
                .mapValues(t -> digest(t._1()) * 31 + sumAndCount(t._2())).collectAsMap()));
        JavaPairRDD<Integer, String> moved = d.repartition(9);
        out.add("repartition " + moved.count() + " " + digest(moved.values().collect()));
        out.add("distinct " + d.mapValues(v -> v.length()).distinct(4).count());
        return out;
    }

    /** An order-independent digest of numbers: their sum and how many. */
    static long sumAndCount(Iterable<Integer> values) {
        long sum = 0;
        long n = 0;
        for (int v : values) {
            sum += v;
            n++;
        }
        return sum * 1_000_003L + n;
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
