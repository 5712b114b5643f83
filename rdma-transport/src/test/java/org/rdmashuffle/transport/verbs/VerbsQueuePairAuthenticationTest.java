package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Optional;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.conf.RdmaShuffleConf.VerbsApi;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.VerbsSupport;

/**
 * With {@code spark.authenticate} on, a node accepts a queue pair only when an authenticated peer
 * announced it over the control connection: a bare rdma_cm connect is refused before its queue pair
 * can READ anything (and the node goes on serving), an authenticated peer READs. With authentication
 * off any connect is accepted, as before. Needs an RDMA device (the SoftiWARP/Soft-RoCE harness).
 */
class VerbsQueuePairAuthenticationTest {
    private static final String HOST = System.getProperty("rdma.test.verbs.host", "");
    /** Which verbs API the nodes use (spark.shuffle.rdma.verbs.api): rdma.test.verbs.api, auto by default. */
    private static final VerbsApi API = VerbsApi.valueOf(
            System.getProperty("rdma.test.verbs.api", "auto").toUpperCase(java.util.Locale.ROOT));
    private static final RdmaShuffleConf CONF = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "verbs",
            "spark.shuffle.rdma.verbs.api", API.name().toLowerCase(java.util.Locale.ROOT),
            "spark.shuffle.rdma.verbs.completionQueueSize", "256", "spark.shuffle.rdma.connectTimeout", "5s",
            "spark.shuffle.rdma.connectRetries", "0"));
    private static final byte[] SECRET = "the application's secret".getBytes(StandardCharsets.UTF_8);

    private static void needsAnRdmaDevice() {
        Optional<String> missing = VerbsSupport.missing(API);
        Assumptions.assumeTrue(missing.isEmpty(), () -> "verbs provider cannot run here: " + missing.orElse(""));
        Assumptions.assumeTrue(!HOST.isEmpty(),
                "set -Drdma.test.verbs.host=<IP address of the RDMA device> to run the verbs tests");
    }

    private static VerbsNode node(byte[] secret) throws IOException {
        return new VerbsNode(CONF, new NodeOptions(HOST, HOST, ControlHandler.NONE, secret));
    }

    @Test
    @Timeout(300)
    void shouldRefuseQueuePairsNoAuthenticatedPeerAnnouncedAndServeOnesThatWere() throws Exception {
        needsAnRdmaDevice();
        byte[] data = new byte[64 << 10];
        new SplittableRandom(5).nextBytes(data);
        ByteBuffer served = ByteBuffer.allocateDirect(data.length).put(data).flip();
        try (VerbsNode victim = node(SECRET);
             VerbsNode attacker = node(null);
             VerbsNode reader = node(SECRET);
             MemoryRegion region = victim.register(served, RegionAccess.REMOTE_READ)) {
            InetSocketAddress target = new InetSocketAddress(HOST, victim.rdmaPort());
            for (int i = 0; i < 5; i++) { // an rdma_cm connect with no announcement: no queue pair
                IOException e = assertThrows(IOException.class,
                        () -> attacker.openEndpoint(victim.localAddress(), target, 5_000).closeQuietly());
                assertTrue(e.getMessage().contains("rdma_cm connect"), e.getMessage());
            }
            assertEquals(5, victim.queuePairsRefused());

            ByteBuffer sinkMem = ByteBuffer.allocateDirect(data.length);
            try (MemoryRegion sink = reader.register(sinkMem, RegionAccess.READ_SINK)) {
                RdmaChannel ch = reader.connect(victim.localAddress()); // announced over the authenticated channel
                RegionDescriptor d = region.descriptor();
                CompletableFuture<Integer> done = new CompletableFuture<>();
                ch.post(new ReadBatch(1).add(d.address(), d.rkey(), data.length, sink, 0, 0),
                        (id, st, n) -> done.complete(st));
                assertEquals(ReadStatus.SUCCESS, done.get(60, TimeUnit.SECONDS));
                assertEquals(-1, sinkMem.duplicate().clear().mismatch(ByteBuffer.wrap(data)));
            }
            assertEquals(5, victim.queuePairsRefused());
        }
    }

    @Test
    @Timeout(300)
    void shouldRefuseARacerFromTheAnnouncedAddressWithoutAProofWhenTheDeviceCarriesPrivateData() throws Exception {
        needsAnRdmaDevice();
        try (VerbsNode victim = node(SECRET); VerbsNode reader = node(SECRET); VerbsNode racer = node(null)) {
            Assumptions.assumeTrue(reader.api().startsWith("java.lang.foreign"),
                    "only java.lang.foreign carries a proof in rdma_cm private data (DiSNI admits by address)");
            InetSocketAddress target = new InetSocketAddress(HOST, victim.rdmaPort());
            byte[] proof = reader.announce(victim.localAddress()); // the honest peer's announcement
            // Another process on the same host races it with the same source address, and no proof:
            IOException e = assertThrows(IOException.class,
                    () -> racer.openEndpoint(victim.localAddress(), target, 5_000).closeQuietly());
            assertTrue(e.getMessage().contains("rdma_cm connect"), e.getMessage());
            reader.connectAnnounced(target, 5_000, proof).closeQuietly(); // the honest peer still gets its own
            assertEquals(1, victim.queuePairsRefused());
        }
    }

    @Test
    @Timeout(300)
    void shouldAcceptAnyQueuePairWhenAuthenticationIsOff() throws Exception {
        needsAnRdmaDevice();
        try (VerbsNode open = node(null); VerbsNode other = node(null)) {
            QueuePair ep = other.openEndpoint(open.localAddress(),
                    new InetSocketAddress(HOST, open.rdmaPort()), 5_000);
            ep.closeQuietly();
            assertEquals(0, open.queuePairsRefused());
        }
    }
}
