package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.Optional;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.transport.RdmaTransport;

/**
 * The strict posture, {@code provider=verbs} with {@code fallback=never}: an executor that cannot run verbs fails
 * its start (its shuffle manager, which Spark builds as the executor starts) with the reason and the keys to
 * change, instead of serving through tcp or Spark's path.
 */
class StrictPostureTest {
    @Test
    void shouldFailTheExecutorsStartNamingTheKeysWhenVerbsCannotRunAndFallbackIsNever() {
        SparkConf conf = new SparkConf().set("spark.shuffle.rdma.provider", "verbs")
                .set("spark.shuffle.rdma.fallback", "never");
        Optional<String> missing = RdmaTransport.unavailable(SparkRdmaConf.from(conf));
        assumeTrue(missing.isPresent(), "verbs can run on this machine: the strict posture starts");
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> new RdmaShuffleManager(conf, false));
        String m = e.getMessage();
        assertTrue(m.contains(missing.get()), m);
        assertTrue(m.contains("spark.shuffle.rdma.fallback=never") && m.contains("spark.shuffle.rdma.fallback=auto")
                && m.contains("spark.shuffle.rdma.provider=auto"), m);
    }
}
