package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.PeerBusyException;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * A node's lines name its keys as its configuration was read: a NodeManager's service, configured with
 * {@code mapreduce.shuffle.rdma.*}, logs those keys when a job passes its share, a control message its size limit,
 * or a connection its idle timeout, and never a {@code spark.shuffle.rdma.*} key its user cannot set; a Spark
 * executor's node names the Spark keys.
 */
class TcpKeyNamesTest {
    private static final String SPARK = RdmaShuffleConf.PREFIX;
    private static final String MAPREDUCE = "mapreduce.shuffle.rdma.";
    private static final String A = "job_1700000000000_0001";
    private static final String B = "job_1700000000000_0002";
    private static final byte[] SECRET_A = "token-of-job-0001".getBytes(StandardCharsets.UTF_8);
    private static final byte[] SECRET_B = "token-of-job-0002".getBytes(StandardCharsets.UTF_8);

    /** A configuration read under {@code prefix}: its settings keep the Spark keys, as MapReduceRdmaConf maps them. */
    private static RdmaShuffleConf conf(String prefix, String... kv) {
        Map<String, String> m = new HashMap<>(Map.of(SPARK + "provider", "tcp", SPARK + "connectRetries", "0"));
        for (int i = 0; i < kv.length; i += 2) {
            m.put(SPARK + kv[i], kv[i + 1]);
        }
        return new RdmaShuffleConf(m, prefix);
    }

    /** Answers "big" with a reply past a 1k limit, never answers "hang", echoes the rest. */
    private static final ControlHandler HANDLER = new ControlHandler() {
        @Override
        public ByteBuffer onMessage(ByteBuffer request) {
            return request;
        }

        @Override
        public CompletableFuture<ByteBuffer> onMessageAsync(String realm, ByteBuffer request) {
            String body = StandardCharsets.UTF_8.decode(request.duplicate()).toString();
            if (body.equals("hang")) {
                return new CompletableFuture<>();
            }
            return CompletableFuture.completedFuture(body.equals("big") ? ByteBuffer.allocate(2048) : request);
        }
    };

    private static ByteBuffer text(String s) {
        return ByteBuffer.wrap(s.getBytes(StandardCharsets.UTF_8));
    }

    private static int read(TcpNode client, TcpNode server, RegionDescriptor d) throws Exception {
        RdmaChannel ch = client.connect(server.localAddress());
        MemoryRegion sink = client.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK);
        CompletableFuture<Integer> done = new CompletableFuture<>();
        ch.post(new ReadBatch(1).add(d.address(), d.rkey(), 4096, sink, 0, 1), (id, status, len) -> done.complete(status));
        return done.get(20, TimeUnit.SECONDS);
    }

    /** Waits until the captured log holds {@code line}. */
    private static void awaitLine(ByteArrayOutputStream log, String line) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!log.toString(StandardCharsets.UTF_8).contains(line)) {
            assertTrue(System.nanoTime() < deadline, "not logged within 20 s: " + line + "\n" + log);
            Thread.sleep(20);
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {MAPREDUCE, SPARK})
    @Timeout(60)
    void shouldNameTheKeysAsConfiguredWhenAJobPassesItsShareAControlMessageItsLimitAndAConnectionItsIdleTimeout(
            String prefix) throws Exception {
        String other = prefix.equals(SPARK) ? MAPREDUCE : SPARK;
        NodeOptions realms = NodeOptions.loopback().withControlHandler(HANDLER)
                .withSecrets(Map.of(A, SECRET_A, B, SECRET_B)::get);
        PrintStream err = System.err;
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        System.setErr(new PrintStream(log, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err
        try (TcpNode limited = new TcpNode(conf(prefix, "maxConnectionsPerRealm", "1", "maxControlMessageSize", "1k"),
                realms);
             TcpNode idling = new TcpNode(conf(prefix, "idleTimeout", "1s"), NodeOptions.loopback()
                     .withControlHandler(HANDLER));
             TcpNode pending = new TcpNode(conf(prefix, "idleTimeout", "1s"), NodeOptions.loopback()
                     .withControlHandler(HANDLER));
             TcpNode a1 = new TcpNode(conf(prefix), NodeOptions.loopback().withRealm(A, SECRET_A));
             TcpNode a2 = new TcpNode(conf(prefix), NodeOptions.loopback().withRealm(A, SECRET_A));
             TcpNode b1 = new TcpNode(conf(prefix), NodeOptions.loopback().withRealm(B, SECRET_B));
             TcpNode plain = new TcpNode(conf(prefix), NodeOptions.loopback())) {
            // A job past its share of the node's connections.
            RegionDescriptor ofA = limited.register(TcpAttacks.content(1, 4096), RegionAccess.REMOTE_READ, A)
                    .descriptor();
            assertEquals(ReadStatus.SUCCESS, read(a1, limited, ofA));
            PeerBusyException busy = assertThrows(PeerBusyException.class, () -> a2.connect(limited.localAddress()));
            assertTrue(busy.getMessage().contains(prefix + "maxConnectionsPerRealm)"), busy.getMessage());
            awaitLine(log, "its realm holds 1 connections; limit " + prefix + "maxConnectionsPerRealm=1 (realm " + A);

            // A reply past the size limit, then a message past it (the client's own limit is the default 64k).
            RdmaChannel toLimited = b1.connect(limited.localAddress());
            ExecutionException dropped = assertThrows(ExecutionException.class,
                    () -> toLimited.call(text("big")).get(20, TimeUnit.SECONDS), "a reply past the limit is dropped");
            assertTrue(dropped.getCause().getMessage().contains("control handler failed"), dropped.getCause().getMessage());
            awaitLine(log, "control reply of 2048 bytes to ");
            awaitLine(log, " exceeds " + prefix + "maxControlMessageSize=1024");
            assertThrows(ExecutionException.class, () -> toLimited.call(ByteBuffer.allocate(2048))
                    .get(20, TimeUnit.SECONDS));
            awaitLine(log, "control message of 2048 bytes claimed, limit " + prefix + "maxControlMessageSize=1024");

            // A connection silent past the idle timeout (its client keeps alive only after a third of 5 min).
            assertEquals(2, plain.connect(idling.localAddress()).call(text("hi")).get(20, TimeUnit.SECONDS)
                    .remaining());
            awaitLine(log, "no byte moved for " + prefix + "idleTimeout (idle)");

            // A control reply the node's handler never gives.
            CompletableFuture<ByteBuffer> never = plain.connect(pending.localAddress()).call(text("hang"));
            awaitLine(log, "its control reply was not ready within " + prefix + "idleTimeout");
            assertThrows(ExecutionException.class, () -> never.get(20, TimeUnit.SECONDS));
        } finally {
            System.setErr(err);
        }
        String lines = log.toString(StandardCharsets.UTF_8);
        assertFalse(lines.contains(other), "a line names a key of " + other + ":\n" + lines);
    }
}
