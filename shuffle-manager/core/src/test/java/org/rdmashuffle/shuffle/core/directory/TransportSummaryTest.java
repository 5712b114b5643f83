package org.rdmashuffle.shuffle.core.directory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.rdmashuffle.transport.TransportChoice;

class TransportSummaryTest {
    private static final long S = 1_000_000_000L;
    private static final TransportChoice MLX = new TransportChoice("verbs", "mlx5_0", "java.lang.foreign",
            "provider=auto", false);
    private static final TransportChoice NO_DEVICE = TransportChoice.tcp("auto: no RDMA device", true);
    private static final TransportChoice ASKED_TCP = TransportChoice.tcp("provider=tcp", false);

    @Test
    void shouldCountVerbsByDeviceAndTcpByReasonWhenExecutorsReport() {
        TransportSummary s = new TransportSummary("executors", 0);
        s.put("1", MLX, 0);
        s.put("2", NO_DEVICE, 0);
        s.put("3", ASKED_TCP, 0);
        s.put("4", TransportChoice.tcp("auto: no RDMA device", true), 0);
        assertEquals("4 executors: 1 verbs (on mlx5_0: 1), 3 tcp (auto: no RDMA device: 2; provider=tcp: 1)",
                s.line());
        s.put("5", new TransportChoice(TransportSummary.NONE, "", "", "Spark's path: port taken", true), 0);
        assertEquals("5 executors: 1 verbs (on mlx5_0: 1), 3 tcp (auto: no RDMA device: 2; provider=tcp: 1), "
                + "1 without a transport (Spark's path: port taken: 1)", s.line());
    }

    @Test
    void shouldSayNoneRunVerbsWhenAllFellBack() {
        TransportSummary s = new TransportSummary("executors", 0);
        s.put("1", NO_DEVICE, 0);
        assertEquals("1 executor: 0 verbs, 1 tcp (auto: no RDMA device: 1)", s.line());
    }

    @Test
    void shouldLogOnceWhenEveryExpectedExecutorReportedAndNotPerRegistration() {
        TransportSummary s = new TransportSummary("executors", 3);
        assertNull(s.due(0), "nothing reported");
        s.put("1", NO_DEVICE, 0);
        assertNull(s.due(1));
        s.put("2", NO_DEVICE, 1);
        assertNull(s.due(1 + TransportSummary.QUIET_NANOS), "two of three reported, and not quiet for long");
        s.put("3", ASKED_TCP, 2);
        assertEquals("3 executors: 0 verbs, 3 tcp (auto: no RDMA device: 2; provider=tcp: 1)", s.due(2));
        assertNull(s.due(3 * S), "the same line again");
        assertNull(s.due(100 * S), "the same line again, much later");
    }

    @Test
    void shouldLogWhatCameAfterALongQuietSpellWhenAnExpectedExecutorNeverReports() {
        TransportSummary s = new TransportSummary("executors", 3);
        s.put("1", NO_DEVICE, 0);
        s.put("2", NO_DEVICE, 0);
        assertNull(s.due(TransportSummary.MISSING_QUIET_NANOS - 1));
        assertEquals("2 executors: 0 verbs, 2 tcp (auto: no RDMA device: 2)",
                s.due(TransportSummary.MISSING_QUIET_NANOS));
    }

    @Test
    void shouldLogAfterAQuietSpellWhenTheExpectedCountIsUnknown() {
        TransportSummary s = new TransportSummary("executors", 0);
        s.put("1", MLX, 0);
        s.put("2", MLX, S);
        assertNull(s.due(S + TransportSummary.QUIET_NANOS - 1));
        assertEquals("2 executors: 2 verbs (on mlx5_0: 2), 0 tcp", s.due(S + TransportSummary.QUIET_NANOS));
    }

    @Test
    void shouldLogAChangeAtMostOncePerIntervalWhenExecutorsComeAndGo() {
        TransportSummary s = new TransportSummary("executors", 1);
        s.put("1", MLX, 0);
        long first = S;
        assertEquals("1 executor: 1 verbs (on mlx5_0: 1), 0 tcp", s.due(first));
        s.put("2", NO_DEVICE, 2 * S); // dynamic allocation adds one
        assertNull(s.due(2 * S + TransportSummary.QUIET_NANOS), "within the interval since the last line");
        long later = first + TransportSummary.MIN_INTERVAL_NANOS;
        assertEquals("2 executors: 1 verbs (on mlx5_0: 1), 1 tcp (auto: no RDMA device: 1)", s.due(later));
        s.remove("2", later + S);
        s.remove("1", later + S);
        assertNull(s.due(later + 10 * TransportSummary.MIN_INTERVAL_NANOS), "nobody left: nothing to say");
        assertEquals("2 executors: 1 verbs (on mlx5_0: 1), 1 tcp (auto: no RDMA device: 1)", s.lifeLine(),
                "over the application, removed executors count");
        s.put("1", ASKED_TCP, later + 2 * S);
        assertEquals("2 executors: 1 verbs (on mlx5_0: 1), 1 tcp (auto: no RDMA device: 1)", s.lifeLine(),
                "an executor that reports again is counted once, as it first reported");
    }

    @Test
    void shouldGroupHostSpecificReasonsInOneShortLineWhenFiveHundredHostsFallBack() {
        TransportSummary s = new TransportSummary("executors", 0);
        String[] names = {"alpha", "bravo", "charlie", "delta", "echo"};
        for (int i = 0; i < 500; i++) {
            String host = i % 2 == 0 ? "node" + i + ".rack" + (i / 40) + ".example.org" : names[i % 5] + "-" + i;
            TransportChoice c = switch (i % 4) {
                case 0 -> TransportChoice.tcp("auto: the verbs node did not start on " + host
                        + ": cannot lock 16 MiB of memory (RLIMIT_MEMLOCK is " + (64 + i) + " KiB)", true);
                case 1 -> TransportChoice.tcp("auto: the verbs node did not start on 10.1." + (i / 250) + "." + i % 250
                        + ": spark.shuffle.rdma.bindAddress 'ib0' names no interface of this host (eth0 10.1.0."
                        + i % 250 + ", lo 127.0.0.1)", true);
                case 2 -> new TransportChoice(TransportSummary.NONE, "", "", "Spark's path: port " + (40_000 + i)
                        + " taken on " + host, true);
                default -> i < 100 ? MLX : NO_DEVICE;
            };
            s.put("exec-" + i, c, 0);
        }
        String line = s.line();
        assertTrue(line.length() < 600, line.length() + " characters: " + line);
        assertEquals("500 executors: 25 verbs (on mlx5_0: 25), 350 tcp ("
                + "auto: the verbs node did not start on <host>: cannot lock # MiB of memory "
                + "(RLIMIT_MEMLOCK is # KiB): "
                + "125; auto: the verbs node did not start on <host>: spark.shuffle.rdma.bindAddress 'ib#' names no "
                + "inter...: 125; auto: no RDMA device: 100), 125 without a transport (Spark's path: port # taken"
                + " on <host>: 125); e.g. \"auto: the verbs node did not start on node0.rack0.example.org: cannot lock "
                + "16 MiB of memory (RLIMIT_MEMLOCK is 64 KiB)\"", line);
        assertEquals(line, s.lifeLine(), "over the application too");
    }

    @Test
    void shouldListTheLargestGroupsAndCountTheRestWhenReasonsDiffer() {
        TransportSummary s = new TransportSummary("executors", 0);
        String[] reasons = {"auto: no RDMA device", "provider=tcp", "auto: libibverbs missing", "auto: no port up",
            "auto: device busy"};
        int n = 0;
        for (int r = 0; r < reasons.length; r++) {
            for (int k = 0; k < reasons.length - r; k++) {
                s.put("e" + n++, TransportChoice.tcp(reasons[r], true), 0);
            }
        }
        assertEquals("15 executors: 0 verbs, 15 tcp (auto: no RDMA device: 5; provider=tcp: 4; "
                + "auto: libibverbs missing: 3; +2 other reasons: 3)", s.line());
    }
}
