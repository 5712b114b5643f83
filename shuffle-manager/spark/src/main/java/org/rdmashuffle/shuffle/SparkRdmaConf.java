package org.rdmashuffle.shuffle;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.SparkConf;
import org.rdmashuffle.conf.ByteSizes;
import org.rdmashuffle.conf.Durations;
import org.rdmashuffle.conf.RdmaShuffleConf;
import scala.Tuple2;

/**
 * Builds an {@link RdmaShuffleConf} from a {@link SparkConf}: every {@code spark.shuffle.rdma.*}
 * entry, plus Spark's own keys where ours are unset — {@code spark.reducer.maxSizeInFlight} for the
 * bytes in flight, {@code spark.shuffle.io.maxRetries} and {@code spark.shuffle.io.retryWait} for
 * connect retries.
 */
public final class SparkRdmaConf {
    private SparkRdmaConf() {
    }

    public static RdmaShuffleConf from(SparkConf spark) {
        Map<String, String> m = new HashMap<>();
        for (Tuple2<String, String> e : spark.getAllWithPrefix(RdmaShuffleConf.PREFIX)) {
            m.put(RdmaShuffleConf.PREFIX + e._1(), e._2());
        }
        inherit(spark, m, "spark.reducer.maxSizeInFlight", RdmaShuffleConf.MAX_BYTES_IN_FLIGHT.name(), true);
        inherit(spark, m, "spark.shuffle.io.maxRetries", RdmaShuffleConf.CONNECT_RETRIES.name(), false);
        inherit(spark, m, "spark.shuffle.io.retryWait", RdmaShuffleConf.CONNECT_RETRY_WAIT.name(), false);
        return new RdmaShuffleConf(m);
    }

    private static void inherit(SparkConf spark, Map<String, String> m, String sparkKey, String ourKey,
                                boolean sizeInMiB) {
        if (m.containsKey(ourKey) || !spark.contains(sparkKey)) {
            return;
        }
        String v = spark.get(sparkKey).trim();
        if (sizeInMiB && v.chars().allMatch(Character::isDigit)) {
            v = v + "m"; // Spark reads a bare spark.reducer.maxSizeInFlight as MiB
        } else if (!sizeInMiB && ourKey.equals(RdmaShuffleConf.CONNECT_RETRY_WAIT.name())
                && v.chars().allMatch(Character::isDigit)) {
            v = v + "s"; // Spark reads a bare spark.shuffle.io.retryWait as seconds
        }
        try {
            if (sizeInMiB) {
                ByteSizes.parse(v);
            } else if (ourKey.equals(RdmaShuffleConf.CONNECT_RETRY_WAIT.name())) {
                Durations.parseMillis(v);
            }
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(sparkKey + "='" + spark.get(sparkKey) + "' cannot be used for "
                    + ourKey + ": " + e.getMessage(), e);
        }
        m.put(ourKey, v);
    }
}
