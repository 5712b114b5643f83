package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/**
 * A process listening on the service's port on another host (127.0.0.2 here), where the service is absent, relays
 * a client's handshake to a node that knows the client's realm: the proofs name the address the client dialled, so
 * the node refuses the relayed handshake (saying so in its log and to the client), the direct one works, and the
 * relay gets no READ served — also when it rewrites the address the HELLO names.
 */
class TcpRelayTest {
    private static final String JOB = "job_1700000000000_0001";
    private static final byte[] SECRET = "token-of-job-0001".getBytes(StandardCharsets.UTF_8);
    private static final InetAddress OTHER_HOST = loopback("127.0.0.2");

    private static InetAddress loopback(String a) {
        try {
            return InetAddress.getByName(a);
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }

    private static RdmaShuffleConf conf() {
        return new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.connectRetries", "0"));
    }

    private static void assumeLoopbackAliases() {
        assumeTrue(System.getProperty("os.name").toLowerCase().startsWith("linux"),
                "needs 127.0.0.2 on lo (Linux routes all of 127/8 there)");
    }

    /** A plain forwarder: listens on 127.0.0.2 and copies bytes both ways to {@code target}. */
    private static final class Relay implements AutoCloseable {
        final ServerSocket listener;
        final List<Socket> sockets = new ArrayList<>();
        final Thread acceptor;

        Relay(InetSocketAddress target) throws IOException {
            listener = new ServerSocket(0, 50, OTHER_HOST);
            acceptor = new Thread(() -> {
                try {
                    for (;;) {
                        Socket in = listener.accept();
                        Socket out = new Socket();
                        out.connect(target, 5000);
                        synchronized (sockets) {
                            sockets.add(in);
                            sockets.add(out);
                        }
                        pump(in, out);
                        pump(out, in);
                    }
                } catch (IOException e) {
                    // closed
                }
            }, "relay");
            acceptor.setDaemon(true);
            acceptor.start();
        }

        NodeAddress address() {
            return new NodeAddress(OTHER_HOST.getHostAddress(), listener.getLocalPort(), TcpNode.PROVIDER);
        }

        private static void pump(Socket from, Socket to) {
            Thread t = new Thread(() -> {
                try {
                    from.getInputStream().transferTo(to.getOutputStream());
                } catch (IOException e) {
                    // either side closed
                } finally {
                    try {
                        to.shutdownOutput();
                    } catch (IOException e) {
                        // already closed
                    }
                }
            }, "relay-pump");
            t.setDaemon(true);
            t.start();
        }

        @Override
        public void close() throws IOException {
            listener.close();
            synchronized (sockets) {
                for (Socket s : sockets) {
                    s.close();
                }
            }
        }
    }

    private static int read(RdmaChannel ch, RegionDescriptor d, int length, MemoryRegion sink) throws Exception {
        CompletableFuture<Integer> done = new CompletableFuture<>();
        ch.post(new ReadBatch(1).add(d.address(), d.rkey(), length, sink, 0, 1),
                (id, status, len) -> done.complete(status));
        return done.get(20, TimeUnit.SECONDS);
    }

    /** The client's refusal through a relay, and what the node logged meanwhile. */
    private static String[] relayedRefusal(NodeOptions serverOptions, NodeOptions clientOptions) throws Exception {
        PrintStream err = System.err;
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        System.setErr(new PrintStream(log, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err
        try (TcpNode server = new TcpNode(conf(), serverOptions);
             TcpNode client = new TcpNode(conf(), clientOptions);
             Relay relay = new Relay(new InetSocketAddress("127.0.0.1", server.localAddress().port()))) {
            ByteBuffer content = TcpAttacks.content(1, 8192);
            RegionDescriptor d = server.register(content, RegionAccess.REMOTE_READ, serverOptions.secrets() == null
                    ? null : JOB).descriptor();
            ByteBuffer sinkMemory = ByteBuffer.allocateDirect(8192);
            MemoryRegion sink = client.register(sinkMemory, RegionAccess.READ_SINK);

            TransportException e = assertThrows(TransportException.class, () -> client.connect(relay.address()));
            assertEquals(1, server.connectionsRefused(), "the relayed handshake refused");
            assertEquals(0, server.stats().readsServed());

            // The direct connection works, byte for byte.
            RdmaChannel direct = client.connect(server.localAddress());
            assertEquals(ReadStatus.SUCCESS, read(direct, d, 8192, sink));
            assertEquals(-1, sinkMemory.duplicate().clear().mismatch(content.duplicate().clear()));
            return new String[] {e.getMessage(), log.toString(StandardCharsets.UTF_8), String.valueOf(relay.listener
                    .getLocalPort()), String.valueOf(server.localAddress().port())};
        } finally {
            System.setErr(err);
        }
    }

    @Test
    @Timeout(60)
    void shouldRefuseARelayedHandshakeAndAcceptTheDirectOneWhenTheNodeKeepsSecretsPerRealm() throws Exception {
        assumeLoopbackAliases();
        String[] r = relayedRefusal(NodeOptions.loopback().withSecrets(realm -> JOB.equals(realm) ? SECRET : null),
                NodeOptions.loopback().withRealm(JOB, SECRET));
        assertTrue(r[0].contains("refused at handshake: this node dialled /127.0.0.2:" + r[2] + ", and the connection "
                + "reached the peer at another address than the one dialled: a relay, port forward or NAT"), r[0]);
        assertTrue(r[1].contains("it dialled /127.0.0.2:" + r[2] + " and reached /127.0.0.1:" + r[3] + ": a relay, "
                + "port forward or NAT between the client and this node"), r[1]);
    }

    @Test
    @Timeout(60)
    void shouldRefuseARelayedHandshakeWhenTheNodeKeepsOneSecretForTheApplication() throws Exception {
        assumeLoopbackAliases();
        String[] r = relayedRefusal(NodeOptions.loopback().withSecret(SECRET),
                NodeOptions.loopback().withSecret(SECRET));
        assertTrue(r[0].contains("reached the peer at another address than the one dialled"), r[0]);
        assertTrue(r[1].contains("it dialled /127.0.0.2:" + r[2] + " and reached /127.0.0.1:" + r[3]), r[1]);
    }

    /**
     * The relay does more than forward: it rewrites the address the HELLO names to the node's own, so the node sends
     * its challenge; the client's proof still names the address it dialled, so the node refuses it, and the READ
     * the relay then sends on that connection is never answered.
     */
    @Test
    @Timeout(60)
    void shouldServeNoReadToARelayThatRewritesTheDialledAddressInTheHello() throws Exception {
        assumeLoopbackAliases();
        try (TcpNode server = new TcpNode(conf(), NodeOptions.loopback().withSecrets(
                realm -> JOB.equals(realm) ? SECRET : null));
             TcpNode client = new TcpNode(conf(), NodeOptions.loopback().withRealm(JOB, SECRET));
             ServerSocket relay = new ServerSocket(0, 50, OTHER_HOST)) {
            RegionDescriptor d = server.register(TcpAttacks.content(2, 4096), RegionAccess.REMOTE_READ, JOB)
                    .descriptor();
            InetSocketAddress nodeAddress = new InetSocketAddress("127.0.0.1", server.localAddress().port());
            CompletableFuture<TransportException> clientSaw = CompletableFuture.supplyAsync(() -> assertThrows(
                    TransportException.class, () -> client.connect(new NodeAddress(OTHER_HOST.getHostAddress(),
                            relay.getLocalPort(), TcpNode.PROVIDER))));
            try (Socket fromClient = relay.accept(); Socket toNode = new Socket()) {
                fromClient.setSoTimeout(20_000);
                toNode.connect(nodeAddress, 5000);
                toNode.setSoTimeout(20_000);
                DataInputStream clientIn = new DataInputStream(fromClient.getInputStream());
                DataInputStream nodeIn = new DataInputStream(toNode.getInputStream());
                OutputStream nodeOut = toNode.getOutputStream();
                byte[] realm = JOB.getBytes(StandardCharsets.UTF_8);
                byte[] ownAddress = Handshake.addressField(
                        new InetSocketAddress(OTHER_HOST, relay.getLocalPort()));
                byte[] hello = new byte[Wire.HELLO_BYTES + 1 + realm.length + ownAddress.length];
                clientIn.readFully(hello);
                int at = Wire.HELLO_BYTES + 1 + realm.length;
                assertArrayEquals(ownAddress, java.util.Arrays.copyOfRange(hello, at, hello.length),
                        "the HELLO names the address the client dialled");
                System.arraycopy(Handshake.addressField(nodeAddress), 0, hello, at, ownAddress.length);
                nodeOut.write(hello);
                byte[] challenge = new byte[Wire.CHALLENGE_BYTES];
                nodeIn.readFully(challenge);
                assertEquals(Wire.HS_OK, ByteBuffer.wrap(challenge).getShort(6), "the rewritten HELLO passes");
                fromClient.getOutputStream().write(challenge);
                byte[] auth = new byte[Wire.AUTH_BYTES];
                clientIn.readFully(auth);
                nodeOut.write(auth);
                byte[] welcome = new byte[Wire.WELCOME_BYTES];
                nodeIn.readFully(welcome);
                assertEquals(Wire.HS_AUTH_FAILED, ByteBuffer.wrap(welcome).getInt(),
                        "the client's proof names the relay's address, not the node's");
                fromClient.getOutputStream().write(welcome);
                // The relay sends READs of its own anyway: nothing comes back but the end of the stream.
                nodeOut.write(ByteBuffer.allocate(Wire.REQUEST_HEADER_BYTES).put(Wire.OP_READ).put(new byte[3])
                        .putInt(1).putInt(4096).putInt(d.rkey()).putLong(d.address()).array());
                assertNotEquals(Wire.OP_READ_REPLY, endOrFirstByte(nodeIn));
            }
            TransportException e = clientSaw.get(30, TimeUnit.SECONDS);
            assertTrue(e.getMessage().contains("unknown job or wrong secret"), e.getMessage());
            assertEquals(0, server.stats().readsServed());
            assertEquals(1, server.connectionsRefused());
        }
    }

    /** The next byte the node sends, or -1 at the end of the stream (or a reset). */
    private static int endOrFirstByte(InputStream in) {
        try {
            return in.read();
        } catch (IOException reset) {
            return -1;
        }
    }
}
