package org.rdmashuffle.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.SparkConf;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * TPC-DS end to end at a tiny scale, in local mode: every table generated to Parquet, the queries
 * found in Spark's tests jar, and four of them (q1 reads store_returns, generated through its parent) giving the same rows under sort shuffle and under
 * rdma-shuffle (blocks through the node's READs).
 */
class TpcdsComparisonTest {
    private static List<List<String>> run(boolean rdma, Path data, List<String> queries) throws Exception {
        SparkConf conf = new SparkConf().setMaster("local[2]").setAppName("tpcds-test")
                .set("spark.ui.enabled", "false").set("spark.driver.host", "127.0.0.1")
                .set("spark.driver.bindAddress", "127.0.0.1").set("spark.sql.shuffle.partitions", "4");
        if (rdma) {
            conf.set("spark.shuffle.manager", "org.rdmashuffle.shuffle.RdmaShuffleManager")
                    .set("spark.shuffle.rdma.provider", "tcp").set("spark.shuffle.rdma.localBlocksFromDisk", "false");
        }
        SparkSession spark = SparkSession.builder().config(conf).getOrCreate();
        try {
            TpcdsData.generate(spark, 0.01, data, 2);
            TpcdsData.register(spark, data);
            if (!rdma) {
                for (io.trino.tpcds.Table t : TpcdsData.tables()) {
                    assertTrue(spark.table(t.getName()).count() > 0, "table " + t.getName() + " is empty");
                }
            }
            List<List<String>> results = new ArrayList<>();
            for (String q : queries) {
                List<String> rows = new ArrayList<>();
                for (Row r : spark.sql(TpcdsComparison.text(q)).collectAsList()) {
                    rows.add(TpcdsComparison.normalise(r));
                }
                rows.sort(null);
                results.add(rows);
            }
            return results;
        } finally {
            spark.stop();
            SparkSession.clearActiveSession();
            SparkSession.clearDefaultSession();
        }
    }

    @Test
    @Timeout(600)
    void shouldGiveIdenticalRowsUnderBothManagersWhenQueriesRunOnGeneratedData(@TempDir Path dir) throws Exception {
        List<String> all = TpcdsComparison.allQueries();
        assertEquals(103, all.size(), "99 queries, four of them in two variants: " + all);
        List<String> queries = List.of("q1", "q3", "q42", "q55");
        Path data = dir.resolve("sf001");
        List<List<String>> sort = run(false, data, queries);
        assertTrue(Files.exists(data.resolve("_SUCCESS")) && Files.isDirectory(data.resolve("store_sales")));
        for (List<String> rows : sort) {
            assertFalse(rows.isEmpty(), "a query returned nothing at scale 0.01: " + sort);
        }
        assertEquals(sort, run(true, data, queries));
    }
}
