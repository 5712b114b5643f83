package org.rdmashuffle.transport.doctor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class HostLimitChecksTest {
    private static final String LIMITS = "Limit                     Soft Limit           Hard Limit           Units\n"
            + "Max open files            1024                 4096                 files\n"
            + "Max locked memory         %s              %s              bytes\n";

    @TempDir
    Path tmp;

    private FakeHost memlock(String soft) {
        return new FakeHost(tmp).file("proc/self/limits", String.format(LIMITS, soft, soft));
    }

    @Test
    void shouldReadTheSoftLockedMemoryLimitWhenLimitsAreListed() {
        assertEquals(Optional.of(8_388_608L), HostLimitChecks.lockedMemoryLimit(String.format(LIMITS, "8388608", "8388608")));
        assertEquals(Optional.empty(), HostLimitChecks.lockedMemoryLimit(String.format(LIMITS, "unlimited", "unlimited")));
        assertThrows(IllegalArgumentException.class, () -> HostLimitChecks.lockedMemoryLimit("Max open files 1 1 files"));
    }

    @Test
    void shouldPassWhenMemlockIsUnlimited() {
        Check c = HostLimitChecks.memlock(memlock("unlimited").context("verbs"));
        assertEquals(Check.Status.PASS, c.status(), c.toString());
        assertEquals("unlimited", c.detail());
    }

    @Test
    void shouldPassWhenTheProcessHoldsIpcLockWhateverTheLimit() {
        FakeHost pod = memlock("65536").file("proc/self/status", "Name:\tjava\nCapPrm:\t00000000a80425fb\n"
                + "CapEff:\t00000000a80465fb\nCapBnd:\t00000000a80465fb\n");
        Check c = HostLimitChecks.memlock(pod.context("verbs"));
        assertEquals(Check.Status.PASS, c.status(), c.toString());
        assertTrue(c.detail().startsWith("CAP_IPC_LOCK: the limit is not enforced"), c.detail());
        FakeHost withoutCap = memlock("65536").file("proc/self/status", "Name:\tjava\nCapEff:\t00000000a80425fb\n");
        assertEquals(Check.Status.FAIL, HostLimitChecks.memlock(withoutCap.context("verbs")).status());
    }

    @Test
    void shouldFailNamingThePoolCapWhenMemlockIsBelowItUnderVerbs() {
        Check c = HostLimitChecks.memlock(memlock("8388608").context("verbs"));

        assertEquals(Check.Status.FAIL, c.status(), c.toString());
        assertEquals("ulimit -l is 8m, below spark.shuffle.rdma.pool.maxRegisteredBytes=1g: registrations will fail",
                c.detail());
        assertTrue(c.fix().contains("LimitMEMLOCK=infinity"), c.fix());
    }

    @Test
    void shouldCountRegisteredOutputsWhenTheirCapIsSet() {
        FakeHost host = memlock(Long.toString(2L << 30));
        Map<String, String> capped = Map.of("spark.shuffle.rdma.maxRegisteredOutputBytes", "512m");
        Map<String, String> tooMuch = Map.of("spark.shuffle.rdma.maxRegisteredOutputBytes", "2g");

        Check enough = HostLimitChecks.memlock(host.context("verbs", Optional.empty(), capped));
        Check short_ = HostLimitChecks.memlock(host.context("verbs", Optional.empty(), tooMuch));
        Check uncapped = HostLimitChecks.memlock(host.context("verbs"));

        assertEquals(Check.Status.PASS, enough.status(), enough.toString());
        assertEquals(Check.Status.FAIL, short_.status(), short_.toString());
        assertTrue(short_.detail().contains("+ spark.shuffle.rdma.maxRegisteredOutputBytes=2g"), short_.detail());
        assertEquals(Check.Status.WARN, uncapped.status(), uncapped.toString());
    }

    @Test
    void shouldWarnUnderAutoAndSkipWhereVerbsCannotRunWhenMemlockIsLow() {
        FakeHost host = memlock("65536");

        assertEquals(Check.Status.WARN, HostLimitChecks.memlock(host.context("auto")).status());
        Check noVerbs = HostLimitChecks.memlock(host.context("auto", Optional.of("no RDMA device"), Map.of()));
        assertEquals(Check.Status.SKIP, noVerbs.status());
        assertEquals("provider=auto will use tcp here: no RDMA device", noVerbs.detail());
        assertEquals(Check.Status.SKIP, HostLimitChecks.memlock(host.context("tcp")).status());
    }

    @Test
    void shouldPassWarnOrFailWithTheSysctlWhenMaxMapCountIsCompared() {
        FakeHost host = new FakeHost(tmp).file("proc/sys/vm/max_map_count", "65530");

        Check plenty = HostLimitChecks.maxMapCount(host.context("tcp"), 20_000);
        Check tight = HostLimitChecks.maxMapCount(host.context("tcp"), 60_000);
        Check short_ = HostLimitChecks.maxMapCount(host.context("tcp"), 100_000);

        assertEquals(Check.Status.PASS, plenty.status(), plenty.toString());
        assertEquals("65530 for 20000 map outputs (one mapping each) and 8192 for the JVM", plenty.detail());
        assertEquals(Check.Status.WARN, tight.status(), tight.toString());
        assertEquals(Check.Status.FAIL, short_.status(), short_.toString());
        assertEquals("sysctl -w vm.max_map_count=262144 (and persist it in /etc/sysctl.d/)", short_.fix());
    }

    @Test
    void shouldWarnWhenMaxMapCountCannotBeRead() {
        Check c = HostLimitChecks.maxMapCount(new FakeHost(tmp).context("tcp"), 10);
        assertEquals(Check.Status.WARN, c.status(), c.toString());
    }

    @Test
    void shouldPassWhenRdmaCmIsThereAndFailUnderVerbsWhenItIsNot() {
        FakeHost without = new FakeHost(tmp);
        Check missing = HostLimitChecks.rdmaCm(without.context("verbs"));
        assertEquals(Check.Status.FAIL, missing.status(), missing.toString());
        assertTrue(missing.fix().startsWith("modprobe rdma_ucm"), missing.fix());

        Check present = HostLimitChecks.rdmaCm(without.file("dev/infiniband/rdma_cm", "").context("verbs"));
        assertEquals(Check.Status.PASS, present.status(), present.toString());
        assertEquals(Check.Status.SKIP, HostLimitChecks.rdmaCm(without.context("tcp")).status());
    }
}
