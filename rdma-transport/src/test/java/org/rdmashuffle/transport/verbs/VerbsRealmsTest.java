package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;

/**
 * Realms on the verbs provider (over {@link EmulatedVerbs}, so it runs where no RDMA device exists): the
 * control handler hears the realm each connection proved, {@link VerbsNode#closeRealm} closes that realm's
 * queue pairs and no other's, its protection domain goes once its regions are closed, and a registration
 * after that opens a fresh one that works; a device that cannot carry rdma_cm private data refuses realms.
 */
class VerbsRealmsTest {
    private static final RdmaShuffleConf CONF = EmulatedPeers.conf(Map.of());
    private static final byte[] SECRET_A = "job_A's token".getBytes(StandardCharsets.UTF_8);
    private static final byte[] SECRET_B = "job_B's token".getBytes(StandardCharsets.UTF_8);
    private static final int BYTES = 16 << 10;

    private static NodeOptions server(ControlHandler handler) {
        return new NodeOptions("127.0.0.1", "127.0.0.1", handler, null)
                .withSecrets(realm -> realm.equals("job_A") ? SECRET_A.clone()
                        : realm.equals("job_B") ? SECRET_B.clone() : null);
    }

    private static NodeOptions client(String host, String realm, byte[] secret) {
        return new NodeOptions(host, host, ControlHandler.NONE, null).withRealm(realm, secret);
    }

    private static int read(RdmaChannel ch, MemoryRegion region, MemoryRegion sink) throws Exception {
        CompletableFuture<Integer> done = new CompletableFuture<>();
        ch.post(new ReadBatch(1).add(region.descriptor().address(), region.descriptor().rkey(), BYTES, sink, 0, 0),
                (id, st, n) -> done.complete(st));
        return done.get(30, TimeUnit.SECONDS);
    }

    private static void await(BooleanSupplier condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() - deadline > 0) {
                throw new AssertionError("never: " + what);
            }
            Thread.sleep(10);
        }
    }

    @Test
    @Timeout(60)
    void shouldGiveTheControlHandlerTheRealmTheConnectionProvedWhenTheNodeServesRealms() throws Exception {
        ControlHandler realmEcho = new ControlHandler() {
            @Override
            public ByteBuffer onMessage(ByteBuffer request) {
                throw new AssertionError("the node calls the handler with the connection's realm");
            }

            @Override
            public ByteBuffer onMessage(String realm, ByteBuffer request) {
                return ByteBuffer.wrap(String.valueOf(realm).getBytes(StandardCharsets.UTF_8));
            }
        };
        EmulatedVerbs device = new EmulatedVerbs();
        try (VerbsNode server = new VerbsNode(CONF, server(realmEcho), device.choice());
             VerbsNode a = new VerbsNode(CONF, client("127.0.0.2", "job_A", SECRET_A), device.choice());
             VerbsNode b = new VerbsNode(CONF, client("127.0.0.3", "job_B", SECRET_B), device.choice())) {
            for (VerbsNode c : new VerbsNode[] {a, b}) {
                ByteBuffer reply = c.userCall(server.localAddress(), ByteBuffer.wrap(new byte[] {42}))
                        .get(30, TimeUnit.SECONDS);
                assertEquals(c == a ? "job_A" : "job_B", StandardCharsets.UTF_8.decode(reply).toString());
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldCloseOnlyThatRealmsQueuePairsAndOpenAFreshDomainWhenARealmIsClosed() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        ByteBuffer dataA = EmulatedPeers.pattern(1, BYTES / 4096);
        ByteBuffer dataB = EmulatedPeers.pattern(2, BYTES / 4096);
        ByteBuffer dataA2 = EmulatedPeers.pattern(3, BYTES / 4096);
        ByteBuffer sinkAMemory = ByteBuffer.allocateDirect(BYTES);
        try (VerbsNode server = new VerbsNode(CONF, server(ControlHandler.NONE), device.choice());
             VerbsNode a = new VerbsNode(CONF, client("127.0.0.2", "job_A", SECRET_A), device.choice());
             VerbsNode b = new VerbsNode(CONF, client("127.0.0.3", "job_B", SECRET_B), device.choice());
             MemoryRegion regionB = server.register(dataB, RegionAccess.REMOTE_READ, "job_B");
             MemoryRegion sinkA = a.register(sinkAMemory, RegionAccess.READ_SINK);
             MemoryRegion sinkB = b.register(ByteBuffer.allocateDirect(BYTES), RegionAccess.READ_SINK)) {
            MemoryRegion regionA = server.register(dataA, RegionAccess.REMOTE_READ, "job_A");
            RdmaChannel toServerB = b.connect(server.localAddress());
            assertEquals(ReadStatus.SUCCESS, read(a.connect(server.localAddress()), regionA, sinkA));
            assertEquals(ReadStatus.SUCCESS, read(toServerB, regionB, sinkB));
            assertEquals(2, server.acceptedQueuePairs());
            assertEquals(2, device.domainsOpened.get(), "one protection domain per realm");

            server.closeRealm("job_A");
            await(() -> server.acceptedQueuePairs() == 1, "job_A's queue pair closed");
            assertTrue(server.domains().hasDomain("job_A"), "its region is still registered in it");
            assertEquals(ReadStatus.SUCCESS, read(toServerB, regionB, sinkB), "job_B's queue pair stays");
            assertEquals(1, server.acceptedQueuePairs());

            regionA.close(); // by its owner: the last thing in job_A's domain
            assertFalse(server.domains().hasDomain("job_A"));
            assertEquals(1, device.domainsDeallocated.get(), "job_A's domain deallocated");
            assertTrue(server.domains().hasDomain("job_B"));

            try (MemoryRegion again = server.register(dataA2, RegionAccess.REMOTE_READ, "job_A")) {
                assertEquals(3, device.domainsOpened.get(), "a fresh domain for job_A");
                assertEquals(ReadStatus.SUCCESS, read(a.connect(server.localAddress()), again, sinkA));
                assertEquals(-1, sinkAMemory.duplicate().clear().mismatch(dataA2.duplicate().clear()));
            }
        }
        assertEquals(device.domainsOpened.get(), device.domainsDeallocated.get(), "every domain deallocated on close");
    }

    @Test
    void shouldRefuseRealmsWhenTheDeviceCannotCarryPrivateData() {
        for (NodeOptions options : new NodeOptions[] {NodeOptions.loopback().withSecrets(realm -> null),
                NodeOptions.loopback().withRealm("job_1_0002", new byte[] {1})}) {
            EmulatedVerbs disniLike = new EmulatedVerbs();
            disniLike.carriesProof = false; // DiSNI 2.1 drops private data on the accepting side
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> new VerbsNode(CONF, options, disniLike.choice()));
            assertEquals("verbs: realms (a secret per job) need rdma_cm private data, which DiSNI 2.1 drops; use "
                    + "spark.shuffle.rdma.verbs.api=ffm on Java 22+", e.getMessage());
        }
    }
}
