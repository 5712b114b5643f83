package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * The accounting both verbs APIs share for accepted queue pairs: caps per node and per source address
 * (asked before the authorisation, which a refused request never spends), the order of "gone" and
 * "connected" (DiSNI's disconnect event can come before its acceptor records the queue pair: it must
 * not stay open and untracked), and which connected queue pairs the reaper closes.
 */
class AcceptedQueuePairsTest {
    private static InetSocketAddress at(String ip, int port) throws Exception {
        return new InetSocketAddress(InetAddress.getByName(ip), port);
    }

    @Test
    void shouldRefusePastEachCapBeforeAskingTheAuthorisationAndFreeASlotWhenAQueuePairGoes() throws Exception {
        AcceptedQueuePairs a = new AcceptedQueuePairs(3, 2);
        AtomicInteger asked = new AtomicInteger();
        AcceptedQueuePairs.Entry e1 = a.admit(at("10.0.0.1", 1), () -> asked.incrementAndGet() > 0, 0).entry();
        AcceptedQueuePairs.Entry e2 = a.admit(at("10.0.0.1", 2), () -> asked.incrementAndGet() > 0, 0).entry();
        assertNotNull(e1);
        assertNotNull(e2);
        AcceptedQueuePairs.Admission third = a.admit(at("10.0.0.1", 3), () -> asked.incrementAndGet() > 0, 0);
        assertEquals(AcceptedQueuePairs.Refusal.ADDRESS_CAP, third.refusal());
        assertEquals(2, asked.get(), "a request past a cap spends no admission");
        assertNotNull(a.admit(at("10.0.0.2", 1), () -> true, 0).entry());
        assertEquals(AcceptedQueuePairs.Refusal.NODE_CAP, a.admit(at("10.0.0.3", 1), () -> true, 0).refusal());
        assertEquals(AcceptedQueuePairs.Refusal.NOT_AUTHORISED, new AcceptedQueuePairs(3, 2)
                .admit(at("10.0.0.3", 1), () -> false, 0).refusal());
        e1.gone();
        assertEquals(2, a.size());
        assertNotNull(a.admit(at("10.0.0.1", 4), () -> true, 0).entry(), "the slot is free again");
    }

    @Test
    void shouldHaveTheAcceptorCloseAQueuePairThatWentAwayBeforeItWasRecordedConnected() throws Exception {
        AcceptedQueuePairs a = new AcceptedQueuePairs(10, 10);
        AcceptedQueuePairs.Entry early = a.admit(at("10.0.0.1", 1), () -> true, 0).entry();
        assertFalse(early.gone(), "a disconnect before it was recorded: nothing for the cm thread to close");
        assertFalse(early.connected(() -> { }, 0), "the acceptor then learns to close it");
        assertEquals(0, a.size());

        AcceptedQueuePairs.Entry normal = a.admit(at("10.0.0.1", 2), () -> true, 0).entry();
        assertTrue(normal.connected(() -> { }, 0));
        assertTrue(normal.gone(), "a disconnect after it was recorded: whoever hears it closes it");
        assertFalse(normal.gone(), "once");
        assertEquals(0, a.size());
    }

    @Test
    void shouldReapOnlyConnectedQueuePairsNoKeepAliveNamedForTheIdleTimeoutAndEachOnce() throws Exception {
        AcceptedQueuePairs a = new AcceptedQueuePairs(10, 10);
        AtomicInteger closed = new AtomicInteger();
        AcceptedQueuePairs.Entry silent = a.admit(at("10.0.0.1", 1), () -> true, 0).entry();
        silent.connected(closed::incrementAndGet, 0);
        AcceptedQueuePairs.Entry alive = a.admit(at("10.0.0.2", 1), () -> true, 0).entry();
        alive.connected(closed::incrementAndGet, 0);
        AcceptedQueuePairs.Entry connecting = a.admit(at("10.0.0.3", 1), () -> true, 0).entry();
        assertNotNull(connecting);
        a.touch(at("10.0.0.2", 1), 900);
        a.touch(at("10.0.0.9", 1), 900); // names none: ignored
        var idle = a.idle(1_500, 1_000);
        assertEquals(1, idle.size(), "only the silent one");
        idle.get(0).run();
        assertEquals(1, closed.get());
        assertTrue(a.idle(1_600, 1_000).isEmpty(), "handed to the reaper once");
    }

    @Test
    void shouldCloseOnlyTheRealmsQueuePairsAndReleaseItsDomainOnceEachIsDestroyedWhenARealmCloses() throws Exception {
        AcceptedQueuePairs a = new AcceptedQueuePairs(10, 10);
        AtomicInteger releasedA = new AtomicInteger();
        AtomicInteger closedA = new AtomicInteger();
        AtomicInteger closedB = new AtomicInteger();
        AcceptedQueuePairs.Binding realmA = new AcceptedQueuePairs.Binding("job_A", null, releasedA::incrementAndGet);
        AcceptedQueuePairs.Binding realmB = new AcceptedQueuePairs.Binding("job_B", null, () -> { });
        AcceptedQueuePairs.Entry connectedA = a.admit(at("10.0.0.1", 1), () -> realmA, 0).entry();
        AcceptedQueuePairs.Entry connectingA = a.admit(at("10.0.0.1", 2), () -> realmA, 0).entry();
        AcceptedQueuePairs.Entry connectedB = a.admit(at("10.0.0.1", 3), () -> realmB, 0).entry();
        assertEquals("job_A", connectedA.realm());
        assertTrue(connectedA.connected(closedA::incrementAndGet, 0));
        assertTrue(connectedB.connected(closedB::incrementAndGet, 0));

        for (Runnable close : a.closeRealm("job_A")) {
            close.run();
        }
        assertEquals(1, closedA.get(), "job_A's connected queue pair is closed");
        assertEquals(0, closedB.get(), "job_B's is not");
        assertFalse(connectingA.connected(() -> { }, 0), "job_A's still connecting one never connects");
        assertTrue(a.closeRealm("job_A").isEmpty(), "each closer is returned once");

        connectedA.destroyed();
        connectedA.destroyed();
        assertEquals(1, releasedA.get(), "released once per queue pair");
        connectingA.destroyed();
        assertEquals(2, releasedA.get());
    }
}
