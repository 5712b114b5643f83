package org.rdmashuffle.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaSparkContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * TeraGen → TeraSort → TeraValidate through real files, in local mode over rdma-shuffle (local
 * blocks sent through the node's READs) with Kryo registration required, so an unregistered class
 * or a wrong sort fails here before it fails on a cluster.
 */
class TeraSortTest {
    @Test
    @Timeout(180)
    void shouldValidateTheSortOfGeneratedRecordsAndRejectUnsortedInput(@TempDir Path dir) throws Exception {
        SparkConf conf = TeraSort.kryo(new SparkConf().setMaster("local[2]").setAppName("terasort-test")
                .set("spark.ui.enabled", "false").set("spark.driver.host", "127.0.0.1")
                .set("spark.driver.bindAddress", "127.0.0.1")
                .set("spark.shuffle.manager", "org.rdmashuffle.shuffle.RdmaShuffleManager")
                .set("spark.shuffle.rdma.provider", "tcp")
                .set("spark.shuffle.rdma.localBlocksFromDisk", "false"));
        String in = dir.resolve("in").toString();
        String out = dir.resolve("out").toString();
        try (JavaSparkContext sc = new JavaSparkContext(conf)) {
            TeraSort.gen(sc, 20_000, 4, in);
            assertTrue(Files.exists(Path.of(in, "_checksum")));
            TeraSort.sort(sc, in, out, 5);
            assertEquals(List.of(), TeraSort.validate(sc, out, in));
            // The unsorted input itself is no valid sort of itself: order problems are found.
            List<String> problems = TeraSort.validate(sc, in, in);
            assertFalse(problems.isEmpty());
            assertTrue(problems.stream().anyMatch(p -> p.contains("not sorted")), problems.toString());
        }
    }
}
