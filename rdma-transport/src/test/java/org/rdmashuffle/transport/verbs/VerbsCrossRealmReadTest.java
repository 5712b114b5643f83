package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
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
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/**
 * Issue 36's cross-job READ over {@link EmulatedVerbs}: a verbs node serving two jobs (realms) with a secret
 * each lets a reducer of job A READ job A's region, and not job B's even with its valid rkey (a remote access
 * error, answered as an unknown key; not one byte lands), and refuses a peer proving job B's secret under job
 * A's name at the control handshake.
 */
class VerbsCrossRealmReadTest {
    private static final byte[] SECRET_A = "job_A's token".getBytes(StandardCharsets.UTF_8);
    private static final byte[] SECRET_B = "job_B's token".getBytes(StandardCharsets.UTF_8);
    private static final int BYTES = 16 << 10;
    private static final RdmaShuffleConf CONF = EmulatedPeers.conf(Map.of("spark.shuffle.rdma.connectRetries", "0"));

    private static NodeOptions server() {
        return new NodeOptions("127.0.0.1", "127.0.0.1", ControlHandler.NONE, null)
                .withSecrets(realm -> switch (realm) {
                    case "job_A" -> SECRET_A.clone();
                    case "job_B" -> SECRET_B.clone();
                    default -> null;
                });
    }

    private static NodeOptions client(String realm, byte[] secret) {
        return new NodeOptions("127.0.0.2", "127.0.0.2", ControlHandler.NONE, null).withRealm(realm, secret);
    }

    private static int read(RdmaChannel ch, RegionDescriptor d, MemoryRegion sink) throws Exception {
        CompletableFuture<Integer> done = new CompletableFuture<>();
        ch.post(new ReadBatch(1).add(d.address(), d.rkey(), BYTES, sink, 0, 0), (id, st, n) -> done.complete(st));
        return done.get(30, TimeUnit.SECONDS);
    }

    @Test
    @Timeout(60)
    void shouldReadOnlyItsOwnJobsRegionWhenAServerServesTwoJobs() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        ByteBuffer dataA = EmulatedPeers.pattern(1, BYTES / 4096);
        ByteBuffer dataB = EmulatedPeers.pattern(2, BYTES / 4096);
        ByteBuffer sinkMemory = ByteBuffer.allocateDirect(BYTES);
        try (VerbsNode server = new VerbsNode(CONF, server(), device.choice());
             VerbsNode reducerA = new VerbsNode(CONF, client("job_A", SECRET_A), device.choice());
             MemoryRegion regionA = server.register(dataA, RegionAccess.REMOTE_READ, "job_A");
             MemoryRegion regionB = server.register(dataB, RegionAccess.REMOTE_READ, "job_B");
             MemoryRegion sink = reducerA.register(sinkMemory, RegionAccess.READ_SINK)) {
            RdmaChannel ch = reducerA.connect(server.localAddress());
            assertEquals(ReadStatus.SUCCESS, read(ch, regionA.descriptor(), sink));
            assertEquals(-1, sinkMemory.duplicate().clear().mismatch(dataA.duplicate().clear()), "job_A's bytes");

            for (int i = 0; i < BYTES; i++) {
                sinkMemory.put(i, (byte) 0x5A);
            }
            // job_B's rkey is valid on the server, but in job_B's protection domain: the READ fails as for an
            // rkey never registered, and nothing of job_B's lands in job_A's sink.
            assertEquals(ReadStatus.UNKNOWN_KEY, read(ch, regionB.descriptor(), sink));
            for (int i = 0; i < BYTES; i++) {
                assertEquals((byte) 0x5A, sinkMemory.get(i), "byte " + i + " of the sink was written");
            }
            // job_A's region still reads on a fresh queue pair of job_A's.
            assertEquals(ReadStatus.SUCCESS, read(reducerA.connect(server.localAddress()), regionA.descriptor(), sink));
            assertEquals(-1, sinkMemory.duplicate().clear().mismatch(dataA.duplicate().clear()));
        }
    }

    @Test
    @Timeout(60)
    void shouldRefuseAtHandshakeWhenAPeerProvesAnotherJobsSecretUnderThisJobsName() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        try (VerbsNode server = new VerbsNode(CONF, server(), device.choice());
             VerbsNode impostor = new VerbsNode(CONF, client("job_A", SECRET_B), device.choice())) {
            TransportException e = assertThrows(TransportException.class, () -> impostor.connect(server.localAddress()));
            assertTrue(e.getMessage().contains("job_A"), e.getMessage());
            assertEquals(0, server.acceptedQueuePairs(), "no queue pair for an impostor");
        }
    }
}
