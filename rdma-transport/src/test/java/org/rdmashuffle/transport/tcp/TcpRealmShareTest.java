package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.ConfigException;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.PeerBusyException;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * A node serving many realms (jobs) gives each at most {@code maxConnectionsPerRealm} of its connections: one
 * job's reducers cannot take the node from the others. A connection past its realm's share is refused busy, which
 * the connecting side sees as a {@link PeerBusyException} (worth trying again later), while another realm still
 * gets in.
 */
class TcpRealmShareTest {
    private static final String A = "job_1700000000000_0001";
    private static final String B = "job_1700000000000_0002";
    private static final byte[] SECRET_A = "token-of-job-0001".getBytes(StandardCharsets.UTF_8);
    private static final byte[] SECRET_B = "token-of-job-0002".getBytes(StandardCharsets.UTF_8);

    private static RdmaShuffleConf conf(String... more) {
        java.util.HashMap<String, String> m = new java.util.HashMap<>(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.connectRetries", "0"));
        for (int i = 0; i < more.length; i += 2) {
            m.put(more[i], more[i + 1]);
        }
        return new RdmaShuffleConf(m);
    }

    private static NodeOptions serverOptions() {
        Map<String, byte[]> secrets = Map.of(A, SECRET_A, B, SECRET_B);
        return NodeOptions.loopback().withSecrets(secrets::get);
    }

    private static int read(RdmaChannel ch, RegionDescriptor d, MemoryRegion sink) throws Exception {
        CompletableFuture<Integer> done = new CompletableFuture<>();
        ch.post(new ReadBatch(1).add(d.address(), d.rkey(), 4096, sink, 0, 1),
                (id, status, len) -> done.complete(status));
        return done.get(20, TimeUnit.SECONDS);
    }

    @Test
    @Timeout(60)
    void shouldRefuseARealmBusyPastItsShareWhileAnotherRealmStillGetsInWhenOneJobFillsItsShare() throws Exception {
        PrintStream err = System.err;
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        System.setErr(new PrintStream(log, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err
        try (TcpNode server = new TcpNode(conf("spark.shuffle.rdma.maxConnectionsPerRealm", "2"), serverOptions());
             TcpNode a1 = new TcpNode(conf(), NodeOptions.loopback().withRealm(A, SECRET_A));
             TcpNode a2 = new TcpNode(conf(), NodeOptions.loopback().withRealm(A, SECRET_A));
             TcpNode a3 = new TcpNode(conf(), NodeOptions.loopback().withRealm(A, SECRET_A));
             TcpNode b1 = new TcpNode(conf(), NodeOptions.loopback().withRealm(B, SECRET_B))) {
            RegionDescriptor ofA = server.register(TcpAttacks.content(1, 4096), RegionAccess.REMOTE_READ, A)
                    .descriptor();
            RegionDescriptor ofB = server.register(TcpAttacks.content(2, 4096), RegionAccess.REMOTE_READ, B)
                    .descriptor();
            assertEquals(ReadStatus.SUCCESS, read(a1.connect(server.localAddress()), ofA,
                    a1.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK)));
            assertEquals(ReadStatus.SUCCESS, read(a2.connect(server.localAddress()), ofA,
                    a2.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK)));

            PeerBusyException busy = assertThrows(PeerBusyException.class, () -> a3.connect(server.localAddress()));
            assertTrue(busy.getMessage().contains("refused at handshake: the peer serves as many connections as its "
                    + "limits allow"), busy.getMessage());
            assertTrue(busy.getMessage().contains("spark.shuffle.rdma.maxConnectionsPerRealm"), busy.getMessage());
            // Another job gets in and READs while A holds its share.
            assertEquals(ReadStatus.SUCCESS, read(b1.connect(server.localAddress()), ofB,
                    b1.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK)));
            assertEquals(3, server.servedConnections(), "nobody was evicted for the realm past its share");

            // A closes one of its connections: its share has room again.
            a1.close();
            while (server.servedConnections() > 2) {
                Thread.sleep(10); // the node sees a1's end of stream on its next wakeup
            }
            assertEquals(ReadStatus.SUCCESS, read(a3.connect(server.localAddress()), ofA,
                    a3.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK)));
        } finally {
            System.setErr(err);
        }
        String lines = log.toString(StandardCharsets.UTF_8);
        assertTrue(lines.contains("its realm holds 2 connections; limit spark.shuffle.rdma.maxConnectionsPerRealm=2 "
                + "(realm " + A + ")"), lines);
    }

    @Test
    void shouldRefuseANegativeShareNamingTheKeyAndTakeAnEighthOfTheNodeWhenUnset() {
        ConfigException e = assertThrows(ConfigException.class,
                () -> conf("spark.shuffle.rdma.maxConnectionsPerRealm", "-1"));
        assertTrue(e.getMessage().contains("spark.shuffle.rdma.maxConnectionsPerRealm"), e.getMessage());
        assertEquals(128, conf().maxConnectionsPerRealm(), "the default: an eighth of maxConnections=1024");
        assertEquals(128, conf("spark.shuffle.rdma.maxConnectionsPerRealm", "0").maxConnectionsPerRealm());
        assertEquals(512, conf("spark.shuffle.rdma.maxConnections", "4096").maxConnectionsPerRealm());
        assertEquals(1, conf("spark.shuffle.rdma.maxConnections", "7").maxConnectionsPerRealm(), "at least one");
        assertEquals(300, conf("spark.shuffle.rdma.maxConnectionsPerRealm", "300").maxConnectionsPerRealm());
    }

    /**
     * The default share is an eighth of the node's connections: while one job holds its share, two more jobs each
     * get theirs (a share of half, the old default, let two jobs take the whole node). Shown with a node of 16
     * connections and so a share of 2, as a node of 1024 has shares of 128.
     */
    @Test
    @Timeout(60)
    void shouldLetThreeJobsInWhileOneHoldsItsShareWhenTheShareIsTheDefault() throws Exception {
        String c = "job_1700000000000_0003";
        byte[] secretC = "token-of-job-0003".getBytes(StandardCharsets.UTF_8);
        Map<String, byte[]> secrets = Map.of(A, SECRET_A, B, SECRET_B, c, secretC);
        RdmaShuffleConf serverConf = conf("spark.shuffle.rdma.maxConnections", "16");
        assertEquals(2, serverConf.maxConnectionsPerRealm());
        java.util.List<TcpNode> clients = new java.util.ArrayList<>();
        try (TcpNode server = new TcpNode(serverConf, NodeOptions.loopback().withSecrets(secrets::get))) {
            try {
                for (String job : java.util.List.of(A, B, c)) {
                    RegionDescriptor d = server.register(TcpAttacks.content(job.hashCode(), 4096),
                            RegionAccess.REMOTE_READ, job).descriptor();
                    for (int i = 0; i < 3; i++) {
                        TcpNode client = new TcpNode(conf(), NodeOptions.loopback().withRealm(job, secrets.get(job)));
                        clients.add(client);
                        if (i < 2) {
                            assertEquals(ReadStatus.SUCCESS, read(client.connect(server.localAddress()), d,
                                    client.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK)), job);
                        } else {
                            assertThrows(PeerBusyException.class, () -> client.connect(server.localAddress()),
                                    job + " past its share");
                        }
                    }
                }
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                while (server.servedConnections() > 6 && System.nanoTime() < deadline) {
                    Thread.sleep(10); // the refused connections drain until their clients' close arrives
                }
                assertEquals(6, server.servedConnections(), "each job holds its share; the node has room for more");
            } finally {
                for (int i = clients.size() - 1; i >= 0; i--) {
                    clients.get(i).close();
                }
            }
        }
    }
}
