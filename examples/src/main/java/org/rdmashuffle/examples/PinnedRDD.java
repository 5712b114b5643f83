package org.rdmashuffle.examples;

import java.util.List;
import org.apache.spark.Partition;
import org.apache.spark.TaskContext;
import org.apache.spark.rdd.RDD;
import scala.collection.Iterator;
import scala.collection.JavaConverters;
import scala.collection.immutable.Seq;

/**
 * Its parent's partitions, each with one preferred location: {@code executor_<host>_<executorId>}, so
 * that with {@code spark.locality.wait} longer than the job every task of the stage runs on the
 * executor named for its partition. The benchmarks use it to decide which executor writes each map
 * output and which one reads each reduce partition (and check it from the tasks' hosts afterwards:
 * a preference is not a guarantee). The one class of the benchmarks that speaks Scala's RDD API.
 */
final class PinnedRDD<T> extends RDD<T> {
    private static final long serialVersionUID = 1L;
    private final String[] locations;

    /**
     * @param locations one per partition of {@code parent}, each {@link #executorLocation}
     * @throws IllegalArgumentException when there is not exactly one location per partition
     */
    PinnedRDD(RDD<T> parent, String[] locations) {
        super(parent, parent.elementClassTag());
        if (locations.length != parent.getNumPartitions()) {
            throw new IllegalArgumentException(locations.length + " locations for " + parent.getNumPartitions()
                    + " partitions");
        }
        this.locations = locations.clone();
    }

    /** Spark's spelling of "this executor" as a preferred location ({@code ExecutorCacheTaskLocation}). */
    static String executorLocation(String host, String executorId) {
        return "executor_" + host + "_" + executorId;
    }

    @Override
    public Iterator<T> compute(Partition split, TaskContext context) {
        return firstParent(elementClassTag()).iterator(split, context);
    }

    @Override
    public Partition[] getPartitions() {
        return firstParent(elementClassTag()).partitions();
    }

    /** An immutable Seq: what RDD declares on Scala 2.13, a narrower (covariant) return on 2.12. */
    @Override
    @SuppressWarnings("deprecation") // scala.collection.JavaConverters: the one converter Scala 2.12 and 2.13 share
    public Seq<String> getPreferredLocations(Partition split) {
        return JavaConverters.asScalaBuffer(List.of(locations[split.index()])).toList();
    }
}
