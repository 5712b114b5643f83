package org.rdmashuffle.conf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class RdmaShuffleConfTest {

    @Test
    void shouldUseDeclaredDefaultsWhenNothingIsSet() {
        RdmaShuffleConf c = RdmaShuffleConf.defaults();
        assertEquals(RdmaShuffleConf.Provider.AUTO, c.provider());
        assertEquals(48L << 20, c.maxBytesInFlight());
        assertEquals(30_000, c.poolAcquireTimeoutMs());
        assertEquals(4096, c.poolMinBufferSizeBytes());
        assertTrue(c.poolPreallocate().entries().isEmpty());
        assertFalse(c.isSet(RdmaShuffleConf.PROVIDER));
        assertEquals(128, c.maxConnectionsPerRealm(), "an eighth of maxConnections=1024");
    }

    @Test
    void shouldNameKeysAsTheUserSetThemWhenReadUnderAnotherPrefix() {
        RdmaShuffleConf spark = RdmaShuffleConf.defaults();
        assertEquals("spark.shuffle.rdma.idleTimeout", spark.keyName(RdmaShuffleConf.IDLE_TIMEOUT));
        RdmaShuffleConf mr = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.idleTimeout", "2min"),
                "mapreduce.shuffle.rdma.");
        assertEquals(120_000, mr.idleTimeoutMs(), "the settings keep the Spark keys");
        assertEquals("mapreduce.shuffle.rdma.idleTimeout", mr.keyName(RdmaShuffleConf.IDLE_TIMEOUT));
        assertEquals("mapreduce.shuffle.rdma.verbs.maxQpReadAtoms", mr.keyName(RdmaShuffleConf.VERBS_MAX_READ_ATOMS));
        assertEquals("mapreduce.shuffle.rdma.port", mr.with(Map.of("spark.shuffle.rdma.port", "0"))
                .keyName(RdmaShuffleConf.PORT), "a copy keeps the prefix");
        ConfigException e = assertThrows(ConfigException.class, () -> new RdmaShuffleConf(Map.of(
                "spark.shuffle.rdma.idleTimeout", "soon", "spark.shuffle.rdma.nope", "1"), "mapreduce.shuffle.rdma."));
        assertEquals(2, e.problems().size(), e.getMessage());
        assertTrue(e.getMessage().contains("mapreduce.shuffle.rdma.idleTimeout='soon'"), e.getMessage());
        assertTrue(e.getMessage().contains("mapreduce.shuffle.rdma.nope: unknown key"), e.getMessage());
        assertFalse(e.getMessage().contains("spark.shuffle.rdma."), e.getMessage());
    }

    @Test
    void shouldNameTheUsersKeysInATransportMessageWhenReadUnderAnotherPrefix() {
        String why = "verbs: realms need rdma_cm private data; use spark.shuffle.rdma.verbs.api=ffm on Java 22+";
        RdmaShuffleConf mr = new RdmaShuffleConf(Map.of(), "mapreduce.shuffle.rdma.");
        assertEquals("verbs: realms need rdma_cm private data; use mapreduce.shuffle.rdma.verbs.api=ffm on Java 22+",
                mr.naming(why));
        assertEquals(why, RdmaShuffleConf.defaults().naming(why));
    }

    @Test
    void shouldTakeAnEighthOfMaxConnectionsAsTheRealmShareWhenItIsZero() {
        assertEquals(512, new RdmaShuffleConf(Map.of("spark.shuffle.rdma.maxConnections", "4096"))
                .maxConnectionsPerRealm());
        assertEquals(1, new RdmaShuffleConf(Map.of("spark.shuffle.rdma.maxConnections", "3"))
                .maxConnectionsPerRealm(), "at least one");
        assertEquals(700, new RdmaShuffleConf(Map.of("spark.shuffle.rdma.maxConnectionsPerRealm", "700"))
                .maxConnectionsPerRealm(), "set: as set");
        ConfigException e = assertThrows(ConfigException.class,
                () -> new RdmaShuffleConf(Map.of("spark.shuffle.rdma.maxConnectionsPerRealm", "-1")));
        assertTrue(e.getMessage().contains("spark.shuffle.rdma.maxConnectionsPerRealm='-1'"), e.getMessage());
    }

    @Test
    void shouldAcceptSparkSizeAndTimeFormsWhenSet() {
        RdmaShuffleConf c = new RdmaShuffleConf(Map.of(
                "spark.shuffle.rdma.maxBytesInFlight", "1g",
                "spark.shuffle.rdma.readBlockSize", "512K",
                "spark.shuffle.rdma.requestTimeout", "2min",
                "spark.shuffle.rdma.connectTimeout", "500ms",
                "spark.shuffle.rdma.provider", "TCP",
                "spark.shuffle.rdma.pool.preallocate", "64k:256, 1m:32"));
        assertEquals(1L << 30, c.maxBytesInFlight());
        assertEquals(512 << 10, c.readBlockSizeBytes());
        assertEquals(120_000, c.requestTimeoutMs());
        assertEquals(500, c.connectTimeoutMs());
        assertEquals(RdmaShuffleConf.Provider.TCP, c.provider());
        assertEquals(List.of(new PreallocationSpec.Entry(64 << 10, 256), new PreallocationSpec.Entry(1 << 20, 32)),
                c.poolPreallocate().entries());
        assertTrue(c.isSet(RdmaShuffleConf.PROVIDER));
    }

    @Test
    void shouldNameKeyValueAndAcceptedRangeWhenValueIsBad() {
        ConfigException e = assertThrows(ConfigException.class, () -> new RdmaShuffleConf(Map.of(
                "spark.shuffle.rdma.maxBytesInFlight", "lots")));
        assertEquals(1, e.problems().size());
        String p = e.problems().get(0);
        assertTrue(p.contains("spark.shuffle.rdma.maxBytesInFlight"), p);
        assertTrue(p.contains("'lots'"), p);
        assertTrue(p.contains("accepted: a size from 64k to 1t"), p);
    }

    @Test
    void shouldReportEveryBadKeyTogetherWhenSeveralAreBad() {
        ConfigException e = assertThrows(ConfigException.class, () -> new RdmaShuffleConf(Map.of(
                "spark.shuffle.rdma.provider", "infiniband",
                "spark.shuffle.rdma.port", "70000",
                "spark.shuffle.rdma.requestTimeout", "1.5s",
                "spark.shuffle.rdma.pool.minBufferSize", "3k")));
        assertEquals(4, e.problems().size(), e.getMessage());
        assertTrue(e.getMessage().contains("spark.shuffle.rdma.provider='infiniband': not one of auto|verbs|tcp"),
                e.getMessage());
        assertTrue(e.getMessage().contains("spark.shuffle.rdma.port='70000': out of range; accepted: an integer "
                + "from 0 to 65535"), e.getMessage());
        assertTrue(e.getMessage().contains("spark.shuffle.rdma.pool.minBufferSize='3k': not a power of two"),
                e.getMessage());
        assertTrue(e.getMessage().contains("spark.shuffle.rdma.requestTimeout='1.5s'"), e.getMessage());
    }

    @Test
    void shouldRejectUnknownKeyWhenItHasOurPrefix() {
        ConfigException e = assertThrows(ConfigException.class, () -> new RdmaShuffleConf(Map.of(
                "spark.shuffle.rdma.maxBytesInFlght", "1m", "spark.executor.memory", "1g")));
        assertEquals(List.of("spark.shuffle.rdma.maxBytesInFlght: unknown key (known keys are listed in "
                + "docs/configuration.md)"), e.problems());
    }

    @Test
    void shouldRejectInconsistentPoolSizesWhenClassesExceedChunkOrCap() {
        ConfigException e = assertThrows(ConfigException.class, () -> new RdmaShuffleConf(Map.of(
                "spark.shuffle.rdma.pool.minBufferSize", "1m",
                "spark.shuffle.rdma.pool.maxBufferSize", "512k",
                "spark.shuffle.rdma.pool.chunkSize", "256k")));
        assertEquals(2, e.problems().size(), e.getMessage());
        ConfigException cap = assertThrows(ConfigException.class, () -> new RdmaShuffleConf(Map.of(
                "spark.shuffle.rdma.pool.maxRegisteredBytes", "64m",
                "spark.shuffle.rdma.pool.preallocate", "1m:100")));
        assertTrue(cap.getMessage().contains("needs 128m of registered chunks"), cap.getMessage());
        ConfigException cls = assertThrows(ConfigException.class, () -> new RdmaShuffleConf(Map.of(
                "spark.shuffle.rdma.pool.preallocate", "16m:1")));
        assertTrue(cls.getMessage().contains("size 16m is not a size class"), cls.getMessage());
    }

    @Test
    void shouldRejectMalformedPreallocationSpecWhenEntryLacksCount() {
        ConfigException e = assertThrows(ConfigException.class, () -> new RdmaShuffleConf(Map.of(
                "spark.shuffle.rdma.pool.preallocate", "64k")));
        assertTrue(e.getMessage().contains("entry '64k' is not size:count"), e.getMessage());
    }

    @Test
    void shouldTakeZeroAsOffAndRefuseAnOrphanCheckIntervalBelowASecond() {
        assertEquals(60_000, new RdmaShuffleConf(Map.of()).orphanCheckIntervalMs());
        assertEquals(0, new RdmaShuffleConf(Map.of("spark.shuffle.rdma.orphanCheckInterval", "0"))
                .orphanCheckIntervalMs());
        assertEquals(2_000, new RdmaShuffleConf(Map.of("spark.shuffle.rdma.orphanCheckInterval", "2s"))
                .orphanCheckIntervalMs());
        ConfigException e = assertThrows(ConfigException.class, () -> new RdmaShuffleConf(Map.of(
                "spark.shuffle.rdma.orphanCheckInterval", "10ms")));
        assertTrue(e.getMessage().contains("spark.shuffle.rdma.orphanCheckInterval='10ms': out of range; accepted: "
                + "0 (off) or a time from 1s to 24h"), e.getMessage());
    }

    @Test
    void shouldKeepExplicitSettingsWhenOverridden() {
        RdmaShuffleConf c = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.port", "4000"))
                .with(Map.of("spark.shuffle.rdma.provider", "tcp"));
        assertEquals(4000, c.port());
        assertEquals(RdmaShuffleConf.Provider.TCP, c.provider());
        assertEquals(Map.of("spark.shuffle.rdma.port", "4000", "spark.shuffle.rdma.provider", "tcp"),
                c.explicitSettings());
    }
}
