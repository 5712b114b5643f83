package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.stream.IntStream;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.LogEvent;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.appender.AbstractAppender;
import org.apache.logging.log4j.core.config.Property;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaSparkContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Tuple2;

/**
 * {@code spark.shuffle.rdma.bindAddress} naming no interface of this host, in local mode (the executor is the
 * driver's own): never a silent fallback to the block manager's host. With {@code fallback=never} the job fails
 * with the key in its cause; with {@code fallback=auto} the executor uses Spark's sort shuffle (the results are
 * right) and its one WARN names the key. (The binding itself, on two hosts: examples' TwoLinkBindIT.)
 */
class RdmaShuffleBindAddressTest {
    private static final String KEY = "spark.shuffle.rdma.bindAddress";
    private static final String NO_SUCH_INTERFACE = "rdmanone9";

    private static SparkConf conf(String fallback) {
        return new SparkConf().setMaster("local[2]").setAppName("rdma-shuffle-bind")
                .set("spark.ui.enabled", "false").set("spark.driver.host", "127.0.0.1")
                .set("spark.driver.bindAddress", "127.0.0.1")
                .set("spark.shuffle.manager", RdmaShuffleManager.class.getName())
                .set("spark.shuffle.rdma.provider", "tcp")
                .set("spark.shuffle.rdma.fallback", fallback)
                .set(KEY, NO_SUCH_INTERFACE);
    }

    /** Per key of 0..999 (i % 1000), how many of 0..19,999: 20 each. */
    private static Map<Integer, Integer> job(JavaSparkContext sc) {
        return new TreeMap<>(sc.parallelize(IntStream.range(0, 20_000).boxed().toList(), 4)
                .mapToPair(i -> new Tuple2<>(i % 1000, 1)).reduceByKey(Integer::sum, 3).collectAsMap());
    }

    @Test
    @Timeout(120)
    void shouldFailTheJobNamingTheKeyWhenBindAddressMatchesNoInterfaceAndFallbackIsNever() {
        Throwable e = assertThrows(Throwable.class, () -> {
            try (JavaSparkContext sc = new JavaSparkContext(conf("never"))) {
                job(sc);
            }
        });
        String all = ShuffleJobs.messages(e);
        assertTrue(all.contains(KEY + "=" + NO_SUCH_INTERFACE + " matches no interface"), all);
        assertTrue(all.contains("fallback=never"), all);
    }

    @Test
    @Timeout(120)
    void shouldUseSortShuffleAndWarnNamingTheKeyWhenBindAddressMatchesNoInterfaceAndFallbackIsAuto() {
        List<String> warnings = new CopyOnWriteArrayList<>();
        AbstractAppender capture = new AbstractAppender("rdma-shuffle-bind", null, null, true, Property.EMPTY_ARRAY) {
            @Override
            public void append(LogEvent e) {
                if (e.getLevel().isMoreSpecificThan(Level.WARN)) {
                    warnings.add(e.getMessage().getFormattedMessage());
                }
            }
        };
        capture.start();
        LoggerContext ctx = (LoggerContext) LogManager.getContext(false);
        ctx.getConfiguration().getRootLogger().addAppender(capture, Level.WARN, null);
        ctx.updateLoggers();
        try (JavaSparkContext sc = new JavaSparkContext(conf("auto"))) {
            Map<Integer, Integer> counts = job(sc);
            assertEquals(1000, counts.size());
            assertTrue(counts.values().stream().allMatch(n -> n == 20), counts.toString());
            RdmaShuffleManager m = (RdmaShuffleManager) SparkEnv.get().shuffleManager();
            assertFalse(m.executorStats().isPresent(), "a node started on the block manager's host instead");
        } finally {
            ctx.getConfiguration().getRootLogger().removeAppender(capture.getName());
            ctx.updateLoggers();
            capture.stop();
        }
        List<String> ours = warnings.stream().filter(w -> w.contains("cannot start its transport")).toList();
        assertEquals(1, ours.size(), "WARN lines: " + warnings);
        assertTrue(ours.get(0).contains(KEY + "=" + NO_SUCH_INTERFACE), ours.get(0));
    }
}
