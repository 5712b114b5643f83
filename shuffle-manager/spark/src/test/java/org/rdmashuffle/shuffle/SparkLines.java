package org.rdmashuffle.shuffle;

import java.lang.reflect.Method;
import java.util.Arrays;
import org.apache.spark.SparkConf;
import org.apache.spark.network.netty.SparkTransportConf$;
import org.apache.spark.network.util.TransportConf;
import org.apache.spark.scheduler.MapStatus;
import org.apache.spark.scheduler.MapStatus$;
import org.apache.spark.storage.BlockManagerId;
import scala.Option;

/**
 * The Spark calls the tests make whose shape differs between the lines one source builds (3.5 with Scala 2.12
 * and 2.13, 4.0, 4.1, 4.2), found by shape at run time so the same test classes link on every line.
 */
final class SparkLines {
    private SparkLines() {
    }

    /** The Spark line the tests run against, as "major.minor" (from the spark-core on the class path). */
    static String version() {
        return org.apache.spark.package$.MODULE$.SPARK_VERSION();
    }

    /**
     * {@code MapStatus.apply(location, sizes, mapTaskId)}: three arguments up to 4.0; 4.1 adds the map output's
     * checksum value, passed as 0.
     */
    static MapStatus mapStatus(BlockManagerId location, long[] sizes, long mapTaskId) {
        Method apply = Arrays.stream(MapStatus$.class.getMethods())
                .filter(m -> m.getName().equals("apply") && m.getParameterCount() >= 3
                        && m.getParameterTypes()[0] == BlockManagerId.class)
                .max(java.util.Comparator.comparingInt(Method::getParameterCount))
                .orElseThrow(() -> new IllegalStateException("no MapStatus.apply in Spark " + version()));
        try {
            return (MapStatus) (apply.getParameterCount() == 4
                    ? apply.invoke(MapStatus$.MODULE$, location, sizes, mapTaskId, 0L)
                    : apply.invoke(MapStatus$.MODULE$, location, sizes, mapTaskId));
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * {@code SparkTransportConf.fromSparkConf(conf, module, cores, role[, sslOptions])}: 3.5 has no SSL argument.
     */
    static TransportConf transportConf(SparkConf conf, String module, int cores) {
        Method from = Arrays.stream(SparkTransportConf$.class.getMethods())
                .filter(m -> m.getName().equals("fromSparkConf") && m.getParameterCount() >= 4)
                .max(java.util.Comparator.comparingInt(Method::getParameterCount))
                .orElseThrow(() -> new IllegalStateException("no SparkTransportConf.fromSparkConf in Spark " + version()));
        try {
            Object[] args = from.getParameterCount() == 5
                    ? new Object[] {conf, module, cores, Option.empty(), Option.empty()}
                    : new Object[] {conf, module, cores, Option.empty()};
            return (TransportConf) from.invoke(SparkTransportConf$.MODULE$, args);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    /** A Scala sequence as a Java list, with the converter Scala 2.12 and 2.13 share. */
    @SuppressWarnings("deprecation")
    static <T> java.util.List<T> asJava(scala.collection.Seq<T> seq) {
        return scala.collection.JavaConverters.seqAsJavaList(seq);
    }
}
