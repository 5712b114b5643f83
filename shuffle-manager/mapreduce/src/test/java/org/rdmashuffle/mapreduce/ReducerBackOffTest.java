package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.hadoop.mapreduce.task.reduce.MapHost;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.rdmashuffle.transport.HandshakeRefusedException;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.PeerBusyException;

/**
 * How a reducer waits for a NodeManager's service it cannot ask (docs/mapreduce.md, "What happens when"): each
 * handshake status a service can answer is told apart by its type and reason, not by its words (sticky HTTP for
 * what cannot change while the job runs, a wait for what can); the waits are jittered so that reducers do not
 * come back in lockstep; a REGISTER answered busy does not reset the wait. Real sockets (a fake service answering
 * the handshake with a chosen status), no cluster; the clock and the jitter are the test's.
 */
class ReducerBackOffTest {
    private static final String JOB = "job_1700000000000_0011";
    private static final byte[] TOKEN = "shuffle-secret-of-job-11".getBytes(StandardCharsets.UTF_8);
    private static final int MAGIC = 0x52445348; // the tcp provider's "RDSH" (docs/wire-format.md)
    private static final Pattern WAIT = Pattern.compile("\\(for (\\d+) ms after");

    /** A NodeManager nobody connects to (the back-off alone is asserted). */
    private static MapHost host(int i) {
        return new MapHost("10.0.0." + i + ":13562", "http://10.0.0." + i + ":13562/mapOutput?job=x&reduce=0&map=");
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    private static long waitMs(ReducerClient c, MapHost host) {
        String why = c.busyReason(host);
        assertNotNull(why, "the host waits");
        Matcher m = WAIT.matcher(why);
        assertTrue(m.find(), why);
        return Long.parseLong(m.group(1));
    }

    /** The status docs/wire-format.md numbers, as the service's CHALLENGE answers it; and what the reducer does. */
    @ParameterizedTest(name = "status {0}: {1}")
    @CsvSource({
        "1, BAD_VERSION, sticky",
        "2, AUTH_MISMATCH, sticky",
        "3, AUTH_FAILED, later", // unknown job or wrong secret: a restarted service that learns the job again
        "4, BUSY, later",
        "6, REALM_REQUIRED, sticky",
        "7, REALM_UNSUPPORTED, sticky",
        "8, OTHER_ADDRESS, sticky", // a relay
        "99, UNKNOWN, later", // a status of a newer service
        "-1, NOT_RDMA_SHUFFLE, sticky", // not the service's magic: another protocol on the port
    })
    @Timeout(60)
    void shouldClassifyEveryHandshakeRefusalAsDocumentedWhenTheServiceAnswersIt(int status, String reason,
            String verdict) throws Exception {
        try (ServerSocket fake = new ServerSocket(0, 5, InetAddress.getLoopbackAddress())) {
            Thread answering = new Thread(() -> {
                try (Socket s = fake.accept(); InputStream in = s.getInputStream();
                     OutputStream out = s.getOutputStream()) {
                    in.readNBytes(24); // the HELLO's fixed part
                    ByteBuffer challenge = ByteBuffer.allocate(24).putInt(status < 0 ? 0x48545450 : MAGIC)
                            .putShort((short) 4).putShort((short) status);
                    out.write(challenge.array());
                    out.flush();
                    in.read(new byte[256]); // until the reducer hangs up
                } catch (IOException ignored) {
                    // the reducer hung up
                }
            });
            answering.setDaemon(true);
            answering.start();
            AtomicLong now = new AtomicLong(1_000_000_000L);
            try (ReducerClient reducer = new ReducerClient(EchoService.conf(fake.getLocalPort()), JOB, TOKEN, now::get,
                    () -> 0.5)) {
                MapHost host = new MapHost("127.0.0.1:13562", "http://127.0.0.1:13562/mapOutput?job=x&reduce=0&map=");
                NodeAddress service = reducer.serviceOf(host);
                IOException e = assertThrows(IOException.class, () -> EchoService.echo(reducer, service, "r"));
                if (reason.equals("BUSY")) {
                    assertInstanceOf(PeerBusyException.class, e, e.toString());
                } else {
                    HandshakeRefusedException refused = assertInstanceOf(HandshakeRefusedException.class, e,
                            e.toString());
                    assertEquals(HandshakeRefusedException.Reason.valueOf(reason), refused.reason());
                }
                boolean sticky = verdict.equals("sticky");
                assertEquals(sticky, ReducerClient.staysSo(e), e.toString());
                assertEquals(!sticky, reducer.cannotAsk(host, service, e), "asked again later: " + e);
                assertEquals(sticky ? 1 : 0, reducer.hostsViaHttp());
                if (sticky) {
                    assertNotNull(reducer.httpReason(host));
                    assertNull(reducer.busyReason(host));
                } else {
                    assertNull(reducer.httpReason(host));
                    assertEquals(ReducerClient.BUSY_FIRST_WAIT_MS, waitMs(reducer, host));
                }
            }
            answering.join(5000);
        }
    }

    @Test
    @Timeout(60)
    void shouldJitterEachWaitWithinAQuarterWhenManyHostsCannotBeAsked() throws Exception {
        AtomicLong now = new AtomicLong(1_000_000_000L);
        Random random = new Random(35);
        try (ReducerClient reducer = new ReducerClient(EchoService.conf(freePort()), JOB, TOKEN, now::get,
                random::nextDouble)) {
            Set<Long> firsts = new HashSet<>();
            for (int i = 1; i <= 20; i++) {
                MapHost h = host(i);
                NodeAddress service = reducer.serviceOf(h);
                long nominal = ReducerClient.BUSY_FIRST_WAIT_MS;
                for (int turn = 0; turn < 7; turn++, nominal = Math.min(ReducerClient.BUSY_MAX_WAIT_MS, nominal * 2)) {
                    reducer.later(h, service, ReducerClient.Later.DOWN, "restarting");
                    long w = waitMs(reducer, h);
                    assertTrue(w >= nominal * 3 / 4 && w <= nominal * 5 / 4, w + " ms for a nominal " + nominal);
                    if (turn == 0) {
                        firsts.add(w);
                    }
                }
            }
            assertTrue(firsts.size() > 10, "the first waits of 20 hosts differ: " + firsts);
            // The wait said is the wait kept: READs are tried again after it, not before.
            MapHost h = host(99);
            reducer.later(h, reducer.serviceOf(h), ReducerClient.Later.DOWN, "restarting");
            long w = waitMs(reducer, h);
            now.addAndGet(TimeUnit.MILLISECONDS.toNanos(w) - 1);
            assertNotNull(reducer.busyReason(h));
            now.addAndGet(1);
            assertNull(reducer.busyReason(h));
        }
    }

    @Test
    @Timeout(60)
    void shouldKeepTheBackOffGrowingWhenARegisterIsAnsweredBusy() throws Exception {
        AtomicLong now = new AtomicLong(1_000_000_000L);
        try (ReducerClient reducer = new ReducerClient(EchoService.conf(freePort()), JOB, TOKEN, now::get,
                () -> 0.5)) {
            MapHost h = host(1);
            NodeAddress service = reducer.serviceOf(h);
            reducer.later(h, service, ReducerClient.Later.BUSY, "handshake busy");
            assertEquals(2000, waitMs(reducer, h));
            now.addAndGet(TimeUnit.MILLISECONDS.toNanos(2000));
            reducer.answered(h, RegisterProtocol.BUSY); // the REGISTER's answer: every register worker taken
            reducer.later(h, service, ReducerClient.Later.BUSY, "handshake busy");
            assertEquals(4000, waitMs(reducer, h), "a busy REGISTER does not reset the handshake-busy back-off");
            now.addAndGet(TimeUnit.MILLISECONDS.toNanos(4000));
            reducer.answered(h, RegisterProtocol.OK);
            reducer.later(h, service, ReducerClient.Later.BUSY, "handshake busy");
            assertEquals(2000, waitMs(reducer, h), "an OK resets it");
        }
    }
}
