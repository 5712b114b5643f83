package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.zip.CRC32;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Tuple2;

/**
 * Eight reducers at once READ ranges of the same map outputs over two connections per serving node
 * (each executor READs its own outputs over loopback as well as the other's), with blocks of about
 * 1 MB, uncompressed, and the default bytes-in-flight budget: a serving node then has large replies
 * for one connection still being written while the other connection READs the same regions. Every
 * record must be the one Spark's sort shuffle delivers.
 */
class RdmaShuffleConcurrentReadersTest {
    private static final int MAPS = 8;
    private static final int PARTITIONS = 16;
    private static final int RECORDS_PER_MAP = 4_000;

    private static SparkConf conf(boolean rdma) {
        return LocalCluster.conf(rdma)
                .setMaster("local-cluster[" + LocalCluster.EXECUTORS + ",4,1024]") // four reducers per executor
                .set("spark.shuffle.compress", "false")
                .set("spark.shuffle.rdma.localBlocksFromDisk", "false"); // two connections to every responder
    }

    /** {@code MAPS} map outputs of 4,000 records of 4 KiB each (16 MB, about 1 MB per block), fixed. */
    private static JavaPairRDD<Integer, byte[]> records(JavaSparkContext sc) {
        List<Integer> maps = new ArrayList<>();
        for (int m = 0; m < MAPS; m++) {
            maps.add(m);
        }
        return sc.parallelize(maps, MAPS).flatMapToPair(m -> {
            List<Tuple2<Integer, byte[]>> out = new ArrayList<>(RECORDS_PER_MAP);
            for (int j = 0; j < RECORDS_PER_MAP; j++) {
                long i = (long) m * RECORDS_PER_MAP + j;
                byte[] v = new byte[4096];
                new SplittableRandom(i).nextBytes(v);
                out.add(new Tuple2<>((int) i, v));
            }
            return out.iterator();
        });
    }

    /** Per reduce partition: index, record count and an order-independent digest over every record's bytes. */
    private static List<String> digests(JavaSparkContext sc) {
        return records(sc).partitionBy(new HashPartitioner(PARTITIONS)).mapPartitionsWithIndex((index, it) -> {
            long n = 0;
            long sum = 0;
            while (it.hasNext()) {
                Tuple2<Integer, byte[]> r = it.next();
                CRC32 crc = new CRC32();
                crc.update(r._2());
                sum += (crc.getValue() ^ ((long) r._1() << 32)) * 0x9E3779B97F4A7C15L;
                n++;
            }
            return List.of(index + ":" + n + ":" + sum).iterator();
        }, true).collect();
    }

    @Test
    @Timeout(600)
    void shouldDeliverEveryRecordWhenReducersOnTwoConnectionsReadLargeBlocksOfTheSameOutputsAtOnce() {
        List<String> expected;
        try (LocalCluster sort = LocalCluster.inProcess(conf(false))) {
            expected = digests(sort.sc);
        }
        try (LocalCluster rdma = new LocalCluster(conf(true))) {
            for (int round = 0; round < 3; round++) {
                assertEquals(expected, digests(rdma.sc), "round " + round);
            }
            rdma.drainEvents();
            assertTrue(rdma.recorder.fetchFailures.isEmpty(), "fetch failures: " + rdma.recorder.fetchFailures);
        }
    }
}
