package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

/**
 * The readiness job in-process against a local cluster of three executor JVMs on the tcp provider (one
 * cluster for both cases): every ordered pair READs and verifies its bytes, and when one executor's region is
 * deregistered before the READs, the pairs reading from it fail with the transport's cause and the job exits
 * 1. Either way no region of the run stays registered. A stage whose tasks outlive its budget is cancelled and
 * named. The matrices are printed, so the build's log shows them.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ReadinessLocalClusterTest {
    private static final int EXECUTORS = 3;
    private static final ReadinessArguments ARGS = new ReadinessArguments(4, 16, 0, 90, 120, false);
    private LocalCluster cluster;

    @BeforeAll
    void start() {
        cluster = new LocalCluster(LocalCluster.conf(true).setMaster("local-cluster[" + EXECUTORS + ",1,1024]"));
    }

    @AfterAll
    void stop() {
        if (cluster != null) {
            cluster.close();
        }
    }

    @Test
    @Timeout(180)
    void shouldReadAndVerifyEveryOrderedPairWhenEveryExecutorServesItsRegion() {
        ReadinessReport r = ReadinessCheck.run(cluster.sc.sc(), ARGS);
        System.out.print(r.text());
        List<String> pairs = pairLines(r);
        assertEquals(EXECUTORS * (EXECUTORS - 1), pairs.size(), r.text());
        for (String p : pairs) {
            assertTrue(p.matches("readiness: \\d+ -> \\d+  OK  [0-9.]+ MB/s  p50 [0-9.]+ ms  p99 [0-9.]+ ms"), p);
        }
        List<String> executorLines = r.lines().stream().filter(l -> l.startsWith("readiness: executor ")).toList();
        assertEquals(EXECUTORS, executorLines.size(), r.text());
        for (String l : executorLines) {
            // the host is the block manager's: 127.0.0.1 or localhost, as earlier tests in the fork left Spark
            assertTrue(l.matches("readiness: executor \\d+ host (127\\.0\\.0\\.1|localhost): tcp \\(.+\\)"), l);
        }
        assertEquals("readiness: verdict OK: 3 executors, 6 of 6 pairs OK, 96.0 MiB verified",
                r.lines().get(r.lines().size() - 1)); // 6 pairs x 16 READs of 1 MiB, every byte compared
        assertEquals(0, r.exitStatus());
        assertEquals(Map.of(), regionsHeld(), "regions of the run stayed registered");
    }

    @Test
    @Timeout(180)
    void shouldFailThePairsReadingAnExecutorWhoseRegionWentAwayWhenTheReadsStart() {
        String[] gone = new String[1];
        ReadinessReport r = ReadinessCheck.run(cluster.sc.sc(), ARGS, (runId, placed) -> {
            ReadinessReport.Placed victim = placed.get(placed.size() - 1);
            gone[0] = victim.executorId();
            List<String> problems = new ArrayList<>();
            Map<String, byte[]> done = ReadinessCheck.onEach(cluster.sc.sc(),
                    Map.of(victim.executorId(), victim.host()),
                    i -> ReadinessCheck.javaSerialize(ReadinessExecutor.deregisterEarly(runId)), problems, "test");
            assertEquals(Boolean.TRUE, ReadinessCheck.javaDeserialize(done.get(victim.executorId())), "" + problems);
            return placed;
        });
        System.out.print(r.text());
        assertEquals(1, r.exitStatus(), r.text());
        for (String p : pairLines(r)) {
            if (p.contains(" -> " + gone[0] + "  ")) {
                assertTrue(p.matches("readiness: \\d+ -> " + gone[0]
                        + "  FAIL READ 1 of 16 at offset 0 failed: unknown or stale rkey"), p);
            } else {
                assertTrue(p.contains("  OK  "), p);
            }
        }
        assertEquals("readiness: verdict FAIL: 3 executors, 4 of 6 pairs OK, 64.0 MiB verified",
                r.lines().get(r.lines().size() - 1));
        assertEquals(Map.of(), regionsHeld(), "regions of the run stayed registered");
    }

    @Test
    @Timeout(60)
    void shouldCancelTheStageAndNameItWhenItsTasksOutliveTheBudget() {
        Map<String, String> targets = ReadinessCluster.awaitExecutors(cluster.sc.sc(), ARGS, new ArrayList<>());
        assertEquals(EXECUTORS, targets.size(), "executors: " + targets);
        List<String> problems = new ArrayList<>();
        Map<String, byte[]> done = ReadinessCheck.onEach(cluster.sc.sc(), targets, i -> {
            Thread.sleep(600_000); // a task that never ends, as one pinned to a lost executor; interrupted
            return ReadinessCheck.javaSerialize(Boolean.TRUE);
        }, problems, "stage 9 (stuck)", java.time.Duration.ofSeconds(1));
        assertEquals(Map.of(), done);
        assertEquals(List.of("stage 9 (stuck) did not finish within 1 s (--stage-seconds): its job was cancelled, "
                + "0 of 3 executors answered (was an executor lost mid-stage and not replaced?)"), problems);
        assertEquals(3L, cluster.sc.parallelize(List.of(1, 2, 3), 3).count(), "the cluster runs jobs again");
    }

    private static List<String> pairLines(ReadinessReport r) {
        return r.lines().stream().filter(l -> l.matches("readiness: \\d+ -> \\d+ .*")).toList();
    }

    /** Executors still holding a readiness region, with how many (tasks spread until each answered). */
    private Map<String, Integer> regionsHeld() {
        Map<String, Integer> held = new TreeMap<>();
        Map<String, Integer> seen = new TreeMap<>();
        for (int round = 0; round < 20 && seen.size() < EXECUTORS; round++) {
            List<Integer> slots = IntStream.range(0, 8 * EXECUTORS).boxed().toList();
            for (String s : cluster.sc.parallelize(slots, slots.size())
                    .map(i -> ReadinessExecutor.executorId() + "=" + ReadinessExecutor.held()).collect()) {
                String[] kv = s.split("=");
                seen.put(kv[0], Integer.parseInt(kv[1]));
            }
        }
        assertEquals(EXECUTORS, seen.size(), "tasks reached only executors " + seen.keySet());
        seen.forEach((id, n) -> {
            if (n != 0) {
                held.put(id, n);
            }
        });
        return held;
    }
}
