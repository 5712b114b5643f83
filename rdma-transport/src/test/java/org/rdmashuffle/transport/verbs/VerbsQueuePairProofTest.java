package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
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
 * With {@code spark.authenticate} on, a queue pair goes only to the holder of the application's secret
 * who asked for it: where both ends carry rdma_cm private data, the connect request must carry a proof
 * (HMAC of the secret over a nonce handed out over the authenticated control connection), so another
 * process on the honest peer's host, racing it with the right source address, is refused. Over
 * {@link EmulatedVerbs}, whose connect requests carry private data.
 */
class VerbsQueuePairProofTest {
    private static final byte[] SECRET = "the application's secret".getBytes(StandardCharsets.UTF_8);
    private static final int BYTES = 64 << 10;
    private static final RdmaShuffleConf CONF = EmulatedPeers.conf(Map.of("spark.shuffle.rdma.connectRetries", "0"));

    private static void readByteExact(VerbsNode reader, VerbsNode victim, MemoryRegion region, ByteBuffer data)
            throws Exception {
        ByteBuffer sinkMem = ByteBuffer.allocateDirect(BYTES);
        try (MemoryRegion sink = reader.register(sinkMem, RegionAccess.READ_SINK)) {
            RdmaChannel ch = reader.connect(victim.localAddress());
            RegionDescriptor d = region.descriptor();
            CompletableFuture<Integer> done = new CompletableFuture<>();
            ch.post(new ReadBatch(1).add(d.address(), d.rkey(), BYTES, sink, 0, 0), (id, st, n) -> done.complete(st));
            assertEquals(ReadStatus.SUCCESS, done.get(20, TimeUnit.SECONDS));
            assertEquals(-1, sinkMem.duplicate().clear().mismatch(data.duplicate().clear()));
        }
    }

    @Test
    @Timeout(60)
    void shouldRefuseARacerWithTheHonestPeersAddressButNoProofWhileTheHonestPeerConnects() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        ByteBuffer data = EmulatedPeers.pattern(3, BYTES / 4096);
        try (VerbsNode victim = EmulatedPeers.node(device, CONF, "127.0.0.1", SECRET);
             VerbsNode reader = EmulatedPeers.node(device, CONF, "127.0.0.2", SECRET);
             VerbsNode racer = EmulatedPeers.node(device, CONF, "127.0.0.2", null); // same host, no secret
             MemoryRegion region = victim.register(data, RegionAccess.REMOTE_READ)) {
            InetSocketAddress target = new InetSocketAddress("127.0.0.1", victim.rdmaPort());
            String[] racerGot = {null};
            // Between the honest peer's announcement and its connect request, the racer's request arrives.
            device.beforeConnect = () -> {
                try {
                    racer.openEndpoint(victim.localAddress(), target, 5_000).closeQuietly();
                    racerGot[0] = "a queue pair";
                } catch (IOException e) {
                    racerGot[0] = "refused: " + e.getMessage();
                }
            };
            try {
                readByteExact(reader, victim, region, data);
            } catch (org.rdmashuffle.transport.TransportException e) {
                org.junit.jupiter.api.Assertions.fail("the honest peer was refused (" + e.getMessage() + ") after the "
                        + "racer got " + racerGot[0]);
            }
            assertNotNull(racerGot[0], "the racer's connect ran");
            assertTrue(racerGot[0].startsWith("refused"), "the racer got " + racerGot[0]);
            assertEquals(1, victim.queuePairsRefused());
        }
    }

    @Test
    @Timeout(60)
    void shouldAdmitByAnnouncedAddressWhenTheDevicesCarryNoProofAndStillRefuseBareConnects() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        device.carriesProof = false; // DiSNI 2.1: the admission is per source address (docs/verbs.md)
        ByteBuffer data = EmulatedPeers.pattern(4, BYTES / 4096);
        try (VerbsNode victim = EmulatedPeers.node(device, CONF, "127.0.0.1", SECRET);
             VerbsNode reader = EmulatedPeers.node(device, CONF, "127.0.0.2", SECRET);
             VerbsNode stranger = EmulatedPeers.node(device, CONF, "127.0.0.3", null);
             MemoryRegion region = victim.register(data, RegionAccess.REMOTE_READ)) {
            InetSocketAddress target = new InetSocketAddress("127.0.0.1", victim.rdmaPort());
            for (int i = 0; i < 3; i++) {
                IOException e = org.junit.jupiter.api.Assertions.assertThrows(IOException.class,
                        () -> stranger.openEndpoint(victim.localAddress(), target, 5_000).closeQuietly());
                assertTrue(e.getMessage().contains("rdma_cm connect"), e.getMessage());
            }
            readByteExact(reader, victim, region, data);
            assertEquals(3, victim.queuePairsRefused());
        }
    }
}
