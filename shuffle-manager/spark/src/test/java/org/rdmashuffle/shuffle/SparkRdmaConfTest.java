package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.conf.ConfigException;
import org.rdmashuffle.conf.RdmaShuffleConf;

class SparkRdmaConfTest {

    @Test
    void shouldTakeOurKeysFromSparkConf() {
        SparkConf spark = new SparkConf(false)
                .set("spark.shuffle.rdma.provider", "tcp")
                .set("spark.shuffle.rdma.pool.maxRegisteredBytes", "2g")
                .set("spark.executor.memory", "4g");
        RdmaShuffleConf c = SparkRdmaConf.from(spark);
        assertEquals(RdmaShuffleConf.Provider.TCP, c.provider());
        assertEquals(2L << 30, c.poolMaxRegisteredBytes());
    }

    @Test
    void shouldHonourSparkKeysWhenOursAreUnset() {
        SparkConf spark = new SparkConf(false)
                .set("spark.reducer.maxSizeInFlight", "96")      // Spark's unit: MiB
                .set("spark.shuffle.io.maxRetries", "7")
                .set("spark.shuffle.io.retryWait", "3");         // Spark's unit: seconds
        RdmaShuffleConf c = SparkRdmaConf.from(spark);
        assertEquals(96L << 20, c.maxBytesInFlight());
        assertEquals(7, c.connectRetries());
        assertEquals(3000, c.connectRetryWaitMs());
    }

    @Test
    void shouldPreferOurKeysOverSparkKeysWhenBothAreSet() {
        SparkConf spark = new SparkConf(false)
                .set("spark.reducer.maxSizeInFlight", "96m")
                .set("spark.shuffle.rdma.maxBytesInFlight", "8m");
        assertEquals(8L << 20, SparkRdmaConf.from(spark).maxBytesInFlight());
    }

    @Test
    void shouldNameBothKeysWhenInheritedSparkValueIsBad() {
        SparkConf spark = new SparkConf(false).set("spark.reducer.maxSizeInFlight", "big");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> SparkRdmaConf.from(spark));
        assertTrue(e.getMessage().contains("spark.reducer.maxSizeInFlight='big'"), e.getMessage());
        assertTrue(e.getMessage().contains("spark.shuffle.rdma.maxBytesInFlight"), e.getMessage());
        SparkConf bad = new SparkConf(false).set("spark.shuffle.rdma.port", "-1");
        ConfigException ce = assertThrows(ConfigException.class, () -> SparkRdmaConf.from(bad));
        assertTrue(ce.getMessage().contains("spark.shuffle.rdma.port='-1'"), ce.getMessage());
    }
}
