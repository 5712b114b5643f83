package org.rdmashuffle.transport.doctor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/** The READ self-test over tcp on loopback: both sides in this JVM. */
@Timeout(60)
class SelfTestTest {
    private static final RdmaShuffleConf TCP = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp"));

    @Test
    void shouldFindTheFirstDifferingByteWhenTheContentIsCompared() {
        ByteBuffer region = ByteBuffer.allocateDirect(4096);
        SelfTestPattern.fill(region, 7);
        assertEquals(-1, SelfTestPattern.firstDifference(region, 1024, 1024, 2048, 7));
        assertEquals(0, SelfTestPattern.firstDifference(region, 1024, 1024, 2048, 8), "another seed, other bytes");
        region.put(1024 + 1000 + 5, (byte) (region.get(1024 + 1000 + 5) ^ 0x10));
        assertEquals(1005, SelfTestPattern.firstDifference(region, 1024, 1024, 2048, 7));
    }

    @Test
    void shouldVerifyEveryByteWhenThePeerReadsFromTheServerOnLoopback() throws Exception {
        try (SelfTestServer server = SelfTestServer.start(TCP, "127.0.0.1")) {
            SelfTestPeer.Outcome o = SelfTestPeer.run(TCP, "127.0.0.1", "127.0.0.1", server.address().port(), 96,
                    1 << 20);

            assertEquals(Check.Status.PASS, o.checks().get(0).status(), o.checks().toString());
            assertEquals(Check.Status.PASS, o.checks().get(1).status(), o.checks().toString());
            assertEquals(96L << 20, o.result().bytesVerified());
            assertEquals(96, o.result().reads());
            assertTrue(o.result().p99Ms() >= o.result().p50Ms() && o.result().p50Ms() > 0, o.result().toString());
            assertEquals(96, server.readsServed());
        }
    }

    @Test
    void shouldKeepServingWhenAPeerAsksForOtherThingsAndReadsOutsideTheRegion() throws Exception {
        try (SelfTestServer server = SelfTestServer.start(TCP, "127.0.0.1");
             RdmaNode rogue = RdmaTransport.open(TCP, NodeOptions.loopback());
             MemoryRegion sink = rogue.register(ByteBuffer.allocateDirect(1 << 20), RegionAccess.READ_SINK)) {
            RdmaChannel ch = rogue.connect(server.address());
            ExecutionException refused = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                    () -> ch.call(ByteBuffer.wrap("give me everything".getBytes(StandardCharsets.US_ASCII)))
                            .get(10, TimeUnit.SECONDS));
            assertNotNull(refused.getCause());
            RegionDescriptor d = SelfTestPattern.parseReply(ch.call(ByteBuffer.wrap(SelfTestPattern.REQUEST))
                    .get(10, TimeUnit.SECONDS)).orElseThrow().region();
            CompletableFuture<Integer> past = new CompletableFuture<>();
            ch.post(new ReadBatch(1).add(d.address() + d.length() - 4096, d.rkey(), 8192, sink, 0, 1),
                    (id, status, len) -> past.complete(status));
            CompletableFuture<Integer> wrongKey = new CompletableFuture<>();
            ch.post(new ReadBatch(1).add(d.address(), d.rkey() + 1, 4096, sink, 0, 2),
                    (id, status, len) -> wrongKey.complete(status));

            assertEquals(ReadStatus.OUT_OF_BOUNDS, past.get(10, TimeUnit.SECONDS));
            assertEquals(ReadStatus.UNKNOWN_KEY, wrongKey.get(10, TimeUnit.SECONDS));
            SelfTestPeer.Outcome o = SelfTestPeer.run(TCP, "127.0.0.1", "127.0.0.1", server.address().port(), 16,
                    1 << 16);
            assertEquals(Check.Status.PASS, o.checks().get(1).status(), o.checks().toString());
            assertEquals(16L << 16, o.result().bytesVerified());
        }
    }

    @Test
    void shouldFailTheConnectCheckWithTheReasonWhenNothingServesThere() throws Exception {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        RdmaShuffleConf once = TCP.with(Map.of("spark.shuffle.rdma.connectRetries", "0"));

        SelfTestPeer.Outcome o = SelfTestPeer.run(once, "127.0.0.1", "127.0.0.1", port, 4, 1 << 20);

        assertEquals(1, o.checks().size(), o.checks().toString());
        Check c = o.checks().get(0);
        assertEquals(Check.Status.FAIL, c.status());
        assertTrue(c.detail().contains("to tcp://127.0.0.1:" + port + ": ") && c.detail().contains("refused"),
                c.detail());
        assertEquals(null, o.result());
    }

    @Test
    void shouldPassBothSidesWhenTheCommandServesAndAnotherReadsThroughIt() throws Exception {
        ByteArrayOutputStream serverOut = new ByteArrayOutputStream();
        PrintStream serverPrint = new PrintStream(serverOut, true, StandardCharsets.UTF_8);
        CompletableFuture<Integer> served = CompletableFuture.supplyAsync(() -> DoctorCommand.run(new String[] {
            "--provider", "tcp", "--bind", "127.0.0.1", "--outputs", "100", "--serve", "--serve-seconds", "2"},
                serverPrint, serverPrint));
        Pattern serving = Pattern.compile("doctor: serving READ self-test at tcp://127\\.0\\.0\\.1:(\\d+)");
        Matcher m = serving.matcher("");
        while (!m.find()) {
            assertTrue(!served.isDone(), "the server stopped before serving: " + serverOut);
            Thread.sleep(20);
            m = serving.matcher(serverOut.toString(StandardCharsets.UTF_8));
        }

        DoctorCommandTest.Run peer = DoctorCommandTest.doctor("--provider", "tcp", "--bind", "127.0.0.1",
                "--outputs", "100", "--peer", "127.0.0.1:" + m.group(1), "--reads", "32", "--json");

        assertEquals(0, peer.status(), peer.out());
        assertTrue(peer.out().contains("{\"name\":\"self-test READ\",\"status\":\"PASS\",\"detail\":\"32 x 1048576 "
                + "bytes, 33554432 bytes verified"), peer.out());
        assertTrue(peer.out().contains("\"bytesVerified\":33554432"), peer.out());
        assertEquals(0, served.get(30, TimeUnit.SECONDS), serverOut.toString(StandardCharsets.UTF_8));
        assertTrue(serverOut.toString(StandardCharsets.UTF_8).contains("PASS  self-test serve  served a 64 MiB region "
                + "for 2 s at tcp://127.0.0.1:" + m.group(1)), serverOut.toString(StandardCharsets.UTF_8));
    }
}
