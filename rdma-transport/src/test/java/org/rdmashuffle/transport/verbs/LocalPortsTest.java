package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** The rule that tells a node's own link failure from a peer's, over fake port states. */
@SuppressWarnings("unchecked")
class LocalPortsTest {
    private final List<String> failures = new ArrayList<>();

    @Test
    void shouldFailTheNodeNamingEveryPortWhenNoPortIsActive() {
        Map<Integer, String> states = new TreeMap<>(Map.of(1, "1: DOWN", 2, "2: INIT"));
        assertTrue(new LocalPorts("mlx4_0", () -> states, failures::add).check());
        assertEquals(List.of("no port of mlx4_0 is active (port 1: 1: DOWN, port 2: 2: INIT)"), failures);
    }

    @Test
    void shouldLeaveTheNodeWorkingWhenOnePortIsActive() {
        assertFalse(new LocalPorts("mlx4_0", () -> Map.of(1, "1: DOWN", 2, "4: ACTIVE"), failures::add).check());
        assertFalse(new LocalPorts("siw0", () -> Map.of(1, "5: ACTIVE_DEFER"), failures::add).check());
        assertEquals(List.of(), failures);
    }

    @Test
    void shouldDecideNothingWhenThePortStatesCannotBeRead() {
        assertFalse(new LocalPorts("emu0", () -> {
            throw new IOException("no such directory");
        }, failures::add).check());
        assertFalse(new LocalPorts("emu0", Map::of, failures::add).check());
        assertFalse(new LocalPorts("nothing_here_0", LocalPorts.sysfs("nothing_here_0"), failures::add).check());
        assertEquals(List.of(), failures);
    }

    @Test
    void shouldReadActivePortsAgainOnlyTenMillisecondsLaterWhenAQueuePairFlushesManyCompletions() {
        AtomicInteger reads = new AtomicInteger();
        AtomicLong now = new AtomicLong(1_000_000_000L);
        Map<Integer, String>[] states = new Map[] {Map.of(1, "4: ACTIVE")};
        LocalPorts p = new LocalPorts("siw0", () -> {
            reads.incrementAndGet();
            return states[0];
        }, failures::add, now::get);
        for (int i = 0; i < 1000; i++) {
            assertFalse(p.check());
        }
        assertEquals(1, reads.get(), "one read for a burst of flushed completions");
        states[0] = Map.of(1, "1: DOWN");
        now.addAndGet(9_999_999L);
        assertFalse(p.check(), "read again within 10 ms of an active state");
        now.addAndGet(1L);
        assertTrue(p.check(), "10 ms later the port is down");
        assertEquals(2, reads.get());
        assertTrue(p.check(), "a port read down is read again each time");
        assertEquals(3, reads.get());
    }

    @Test
    void shouldFailTheNodeWhenRdmaCmReportsTheDeviceRemoved() {
        new LocalPorts("rxe0", () -> Map.of(1, "4: ACTIVE"), failures::add).deviceRemoved();
        assertEquals(List.of("rdma_cm reports rxe0 removed"), failures);
    }
}
