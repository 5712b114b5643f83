package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.List;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.shuffle.ReadinessReport.Pair;
import org.rdmashuffle.shuffle.ReadinessReport.Placed;

/** The readiness job's command line, matrix, pattern and measures, without a cluster. */
class ReadinessCheckTest {
    private static Placed tcp(String id) {
        return new Placed(id, "10.0.0." + id, "10.0.0." + id, 7000, "tcp", 0x1000, 4 << 20, 42, "tcp", "", "",
                "spark.shuffle.rdma.provider=tcp", false, null);
    }

    private static Placed verbs(String id) {
        return new Placed(id, "h" + id, "h" + id, 7000, "verbs", 0x1000, 4 << 20, 42, "verbs", "siw0",
                "java.lang.foreign", "spark.shuffle.rdma.provider=verbs", false, null);
    }

    private static Pair ok(String from, String to) {
        return new Pair(from, to, true, 16 << 20, 812.44, 1.08, 2.31, null);
    }

    @Test
    void shouldTakeDefaultsWhenNoArgumentIsGiven() {
        ReadinessArguments a = ReadinessArguments.parse();
        assertEquals(ReadinessArguments.defaults(), a);
        assertEquals(16, a.regionMiB());
        assertEquals(64, a.reads());
    }

    @Test
    void shouldReadEveryOptionWhenAllAreGiven() {
        assertEquals(new ReadinessArguments(8, 200, 3, 30, 45, false),
                ReadinessArguments.parse("--mib", "8", "--reads", "200", "--executors", "3", "--wait-seconds", "30",
                        "--stage-seconds", "45"));
        assertTrue(ReadinessArguments.parse("--reads", "5", "--help").help());
    }

    @Test
    void shouldNameTheOptionWhenAnArgumentIsWrong() {
        assertEquals("unknown argument '--size'", assertThrows(IllegalArgumentException.class,
                () -> ReadinessArguments.parse("--size", "1")).getMessage());
        assertEquals("--reads needs a number",
                assertThrows(IllegalArgumentException.class, () -> ReadinessArguments.parse("--reads")).getMessage());
        assertEquals("--mib needs a number, not 'lots'",
                assertThrows(IllegalArgumentException.class, () -> ReadinessArguments.parse("--mib", "lots"))
                        .getMessage());
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ReadinessArguments.parse("--mib", "0"))
                .getMessage().startsWith("--mib 0 is out of range"));
    }

    @Test
    void shouldRefuseARegionOfTwoGiBOrMoreWhenItsBytesWouldNotFitAnInt() {
        assertEquals(1024, ReadinessArguments.parse("--mib", "1024").regionMiB());
        assertEquals(1 << 30, ReadinessArguments.bytesOf(1024));
        for (String mib : new String[] {"1025", "2048", "4095", "4096"}) {
            assertEquals("--mib " + mib + " is out of range; accepted: 1..1024", assertThrows(
                    IllegalArgumentException.class, () -> ReadinessArguments.parse("--mib", mib)).getMessage());
        }
        assertThrows(ArithmeticException.class, () -> ReadinessArguments.bytesOf(2048), "not a negative size");
        assertTrue(ReadinessArguments.USAGE.contains("(default 16, 1..1024)"), ReadinessArguments.USAGE);
        assertTrue(ReadinessArguments.USAGE.contains("direct memory and locked memory on top of the executor's pool"),
                ReadinessArguments.USAGE);
        assertEquals(ReadinessArguments.DEFAULT_STAGE_SECONDS, ReadinessArguments.parse().stageSeconds());
        assertTrue(assertThrows(IllegalArgumentException.class, () -> ReadinessArguments.parse("--stage-seconds", "0"))
                .getMessage().startsWith("--stage-seconds 0 is out of range"));
    }

    @Test
    void shouldRefuseTheJobWhenTheShuffleManagerIsNotRdmaShuffle() {
        String why = ReadinessCheck.wrongManager(new SparkConf(false));
        assertTrue(why.startsWith("spark.shuffle.manager is 'sort', not org.rdmashuffle.shuffle.RdmaShuffleManager"),
                why);
        assertNull(ReadinessCheck.wrongManager(new SparkConf(false)
                .set("spark.shuffle.manager", RdmaShuffleManager.class.getName())));
    }

    @Test
    void shouldCountExecutorsFromTheConfigurationWhenNoneAreNamed() {
        ReadinessArguments none = ReadinessArguments.defaults();
        assertEquals(3, ReadinessCluster.expected(new SparkConf(false).set("spark.master", "local-cluster[3,1,1024]"),
                none));
        assertEquals(5, ReadinessCluster.expected(new SparkConf(false).set("spark.executor.instances", "5"), none));
        assertEquals(2, ReadinessCluster.expected(new SparkConf(false).set("spark.executor.instances", "5"),
                new ReadinessArguments(1, 1, 2, 1, 1, false)));
        assertEquals(0, ReadinessCluster.expected(new SparkConf(false).set("spark.master", "yarn"), none));
    }

    @Test
    void shouldPrintEveryExecutorAndPairAndExitZeroWhenAllPairsAreOk() {
        ReadinessReport r = ReadinessReport.of("checking", List.of(tcp("10"), tcp("2")),
                List.of(ok("2", "10"), ok("10", "2")), List.of(), List.of(), false);
        assertEquals(List.of("readiness: checking",
                "readiness: executor 2 host 10.0.0.2: tcp (spark.shuffle.rdma.provider=tcp)",
                "readiness: executor 10 host 10.0.0.10: tcp (spark.shuffle.rdma.provider=tcp)",
                "readiness: 2 -> 10  OK  812.4 MB/s  p50 1.1 ms  p99 2.3 ms",
                "readiness: 10 -> 2  OK  812.4 MB/s  p50 1.1 ms  p99 2.3 ms",
                "readiness: verdict OK: 2 executors, 2 of 2 pairs OK, 32.0 MiB verified"), r.lines());
        assertEquals(0, r.exitStatus());
    }

    @Test
    void shouldExitOneWithTheCauseWhenAPairFailsOrNeverReported() {
        ReadinessReport r = ReadinessReport.of("checking", List.of(verbs("1"), verbs("2"), verbs("3")),
                List.of(ok("1", "2"), Pair.failed("1", "3", "READ 1 of 4 at offset 0 failed: unknown or stale rkey"),
                        ok("2", "1"), ok("2", "3"), ok("3", "1")), List.of(), List.of(), true);
        assertEquals(1, r.exitStatus());
        assertTrue(r.lines().contains("readiness: executor 1 host h1: verbs on siw0 through java.lang.foreign"));
        assertTrue(r.lines().contains("readiness: 1 -> 3  FAIL READ 1 of 4 at offset 0 failed: unknown or stale rkey"));
        assertTrue(r.lines().contains("readiness: 3 -> 2  FAIL no result came back from executor 3"));
        assertEquals("readiness: verdict FAIL: 3 executors, 4 of 6 pairs OK, 64.0 MiB verified",
                r.lines().get(r.lines().size() - 1));
    }

    @Test
    void shouldFailAnExecutorOnTcpWhenThePostureIsStrict() {
        List<Pair> pairs = List.of(ok("1", "2"), ok("2", "1"));
        assertEquals(0, ReadinessReport.of("c", List.of(verbs("1"), tcp("2")), pairs, List.of(), List.of(), false)
                .exitStatus());
        ReadinessReport strict = ReadinessReport.of("c", List.of(verbs("1"), tcp("2")), pairs, List.of(), List.of(),
                true);
        assertEquals(1, strict.exitStatus());
        assertTrue(strict.lines().contains("readiness: executor 2 host 10.0.0.2: tcp (spark.shuffle.rdma.provider=tcp)"
                + " FAIL: provider=verbs with fallback=never wants verbs here"), strict.text());
        assertTrue(strict.lines().get(strict.lines().size() - 1).endsWith(", 1 executor not ready"), strict.text());
    }

    @Test
    void shouldFailTheVerdictWhenTheClusterHasAProblemOrNoExecutor() {
        ReadinessReport none = ReadinessReport.of("c", List.of(), List.of(), List.of("no executor registered"),
                List.of(), false);
        assertEquals(1, none.exitStatus());
        assertTrue(none.lines().contains("readiness: FAIL no executor registered"));
        ReadinessReport noNode = ReadinessReport.of("c", List.of(Placed.failed("1", "h1", "no rdma-shuffle node: x"),
                tcp("2")), List.of(), List.of(), List.of(), false);
        assertEquals(1, noNode.exitStatus());
        assertTrue(noNode.lines().contains("readiness: executor 1 host h1: FAIL no rdma-shuffle node: x"));
    }

    @Test
    void shouldFindTheFirstWrongByteWhenAReadLandsSomethingElse() {
        long seed = ReadinessReads.seed("run", "1");
        ByteBuffer region = ByteBuffer.allocate(3 << 20);
        ReadinessReads.fill(region, seed);
        ByteBuffer read = region.slice(1 << 20, 1 << 20);
        assertNull(ReadinessReads.firstDifference(read, 1 << 20, seed, 1 << 20));
        assertTrue(ReadinessReads.firstDifference(read, 1 << 20, ReadinessReads.seed("run", "2"), 1 << 20) != null,
                "another executor's pattern passed");
        assertTrue(ReadinessReads.firstDifference(read, 1 << 20, seed, 0) != null, "another offset passed");
        byte at = read.get(12_345);
        read.put(12_345, (byte) (at ^ 0x10));
        assertEquals("byte " + ((1 << 20) + 12_345) + " of the region is 0x" + Integer.toHexString((at ^ 0x10) & 0xFF)
                + ", the pattern has 0x" + Integer.toHexString(at & 0xFF),
                ReadinessReads.firstDifference(read, 1 << 20, seed, 1 << 20));
    }

    @Test
    void shouldMeasureRateAndNearestRankPercentilesWhenReadsComplete() {
        long[] nanos = new long[100];
        for (int i = 0; i < 100; i++) {
            nanos[i] = (100 - i) * 1_000_000L; // 100 ms .. 1 ms
        }
        Pair p = ReadinessReads.measured("1", "2", nanos);
        assertEquals(50.0, p.p50Ms(), 1e-9);
        assertEquals(99.0, p.p99Ms(), 1e-9);
        assertEquals(100L << 20, p.bytesVerified());
        assertEquals((100 << 20) / 5.05 / 1e6, p.mbPerSecond(), 1e-6); // 100 MiB in 5.05 s
        assertEquals("0.25", ReadinessReport.millis(0.254));
    }
}
