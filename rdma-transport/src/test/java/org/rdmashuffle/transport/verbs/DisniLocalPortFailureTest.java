package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * Defect 2 of issue 33: on the DiSNI path a READ that failed because this node's own port went down must
 * find the node's failure recorded when it is reported, so that the core does not blame the peer. DiSNI
 * needs libdisni, so the DiSNI path's handler ({@link DisniEvents}, what {@link VerbsEndpoint} hands
 * DiSNI's completions and rdma_cm events to) runs over {@link EmulatedVerbs}, with the port states a fake.
 */
class DisniLocalPortFailureTest {
    private static final RdmaShuffleConf CONF = EmulatedPeers.conf(Map.of());
    private static final int BLOCK = 4096;

    /** What the READ's listener saw: its status, and the node's recorded failure at that moment. */
    private record Seen(int status, Throwable nodeFailure) {
    }

    /** A READ through the client's channel, held on the wire until its port state is set and the port flaps. */
    private static Seen readAcrossAFlap(AtomicReference<String> port, String stateAtFlap) throws Exception {
        EmulatedVerbs serverAdapter = new EmulatedVerbs();
        EmulatedVerbs clientAdapter = new EmulatedVerbs();
        clientAdapter.disniPorts = () -> Map.of(1, port.get());
        ByteBuffer served = EmulatedPeers.pattern(0, 1);
        try (VerbsNode server = EmulatedPeers.node(serverAdapter, CONF, "127.0.0.1", null);
             VerbsNode client = EmulatedPeers.node(clientAdapter, CONF, "127.0.0.1", null);
             MemoryRegion region = server.register(served, RegionAccess.REMOTE_READ);
             MemoryRegion sink = client.register(ByteBuffer.allocateDirect(BLOCK), RegionAccess.READ_SINK)) {
            RdmaChannel ch = client.connect(server.localAddress());
            CountDownLatch gate = new CountDownLatch(1);
            clientAdapter.landingGate = gate;
            CompletableFuture<Seen> seen = new CompletableFuture<>();
            RegionDescriptor d = region.descriptor();
            ch.post(new ReadBatch(1).add(d.address(), d.rkey(), BLOCK, sink, 0, 7),
                    (id, status, len) -> seen.complete(new Seen(status, client.failure())));
            port.set(stateAtFlap);
            EmulatedVerbs.listening(client.rdmaPort()).flap(); // every queue pair of the client's device fails
            clientAdapter.landingGate = null;
            gate.countDown(); // READs posted again (a peer's failure, not ours) may land now
            return seen.get(30, TimeUnit.SECONDS);
        }
    }

    @Test
    @Timeout(60)
    void shouldFindTheNodeFailedWhenAReadFailsBecauseTheLocalPortWentDown() throws Exception {
        Seen s = readAcrossAFlap(new AtomicReference<>("4: ACTIVE"), "1: DOWN");
        assertNotNull(s.nodeFailure(), "the READ's failure (status " + s.status() + ") was reported while the "
                + "node had no failure recorded, though its own port is down: the peer would be blamed");
        assertTrue(s.nodeFailure().getMessage().contains("DOWN"), s.nodeFailure().getMessage());
        assertNotEquals(ReadStatus.SUCCESS, s.status());
    }

    @Test
    @Timeout(60)
    void shouldLeaveTheNodeWorkingWhenQueuePairsFailWhileItsPortIsActive() throws Exception {
        Seen s = readAcrossAFlap(new AtomicReference<>("4: ACTIVE"), "4: ACTIVE");
        assertNull(s.nodeFailure(), "a queue pair's failure with the local port active failed the node");
        assertEquals(ReadStatus.SUCCESS, s.status(), "the READ posted again on a fresh queue pair");
    }

    @Test
    @Timeout(60)
    void shouldFindTheNodeFailedWhenRdmaCmReportsItsDeviceRemoved() throws Exception {
        EmulatedVerbs serverAdapter = new EmulatedVerbs();
        EmulatedVerbs clientAdapter = new EmulatedVerbs();
        try (VerbsNode server = EmulatedPeers.node(serverAdapter, CONF, "127.0.0.1", null);
             VerbsNode client = EmulatedPeers.node(clientAdapter, CONF, "127.0.0.1", null)) {
            client.connect(server.localAddress());
            QueuePair qp = EmulatedVerbs.listening(client.rdmaPort()).queuePairs().get(0);
            new DisniEvents(client, () -> Map.of(1, "4: ACTIVE")).onDisconnected(qp, true);
            assertNotNull(client.failure(), "rdma_cm reported the node's device removed; the node works on");
        }
    }
}
