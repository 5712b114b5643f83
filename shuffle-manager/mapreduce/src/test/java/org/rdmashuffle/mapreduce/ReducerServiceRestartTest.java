package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.mapreduce.EchoService.echo;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.mapreduce.task.reduce.MapHost;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.PeerBusyException;
import org.rdmashuffle.transport.RdmaNode;

/**
 * A NodeManager's service that goes down (a NodeManager or service restart) or comes back not knowing the job is
 * not given up on: the reducer fetches that host's outputs over HTTP for a while and READs again once the service
 * answers; only what cannot change while a job runs (here: something else than the service on its port) sends the
 * host to HTTP for good. Real sockets, no cluster; the back-off's clock is the test's. What a fetcher thread does
 * on its turn of a host follows from {@link ReducerClient#httpReason} and {@link ReducerClient#busyReason}
 * ({@link RdmaFetcher#run}'s first step), which are what is asserted here.
 */
class ReducerServiceRestartTest {
    private static final String JOB = "job_1700000000000_0009";
    private static final byte[] TOKEN = "shuffle-secret-of-job-9".getBytes(StandardCharsets.UTF_8);
    private static final MapHost HOST = new MapHost("127.0.0.1:13562",
            "http://127.0.0.1:13562/mapOutput?job=x&reduce=0&map=");
    private static RdmaShuffleConf conf(int port) {
        return EchoService.conf(port, "spark.shuffle.rdma.requestTimeout", "5s");
    }

    /** The service on {@code port}, knowing the job when {@code knowsJob}. */
    private static RdmaNode service(int port, boolean knowsJob) throws IOException {
        return EchoService.open(conf(port), JOB, knowsJob ? TOKEN : null);
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    @Test
    @Timeout(60)
    void shouldReadAgainWhenTheServiceComesBackAfterItWasDownOrDidNotKnowTheJob() throws Exception {
        AtomicLong now = new AtomicLong(1_000_000_000L);
        int port = freePort();
        try (ReducerClient reducer = new ReducerClient(conf(port), JOB, TOKEN, now::get, () -> 0.5)) {
            NodeAddress service = reducer.serviceOf(HOST);
            try (RdmaNode up = service(port, true)) {
                assertEquals("r1", echo(reducer, service, "r1"));
                reducer.answered(HOST);
            }
            // The service is down (its NodeManager restarts): connection refused or lost.
            IOException down = assertThrows(IOException.class, () -> echo(reducer, service, "r2"));
            assertFalse(down instanceof PeerBusyException, down.toString());
            assertFalse(ReducerClient.staysSo(down), down.toString());
            assertTrue(reducer.cannotAsk(HOST, service, down), "a service down is asked again later");
            assertNull(reducer.httpReason(HOST), "not given up on: " + reducer.httpReason(HOST));
            assertEquals(0, reducer.hostsViaHttp());
            String why = reducer.busyReason(HOST);
            assertNotNull(why, "this turn of the host goes over HTTP");
            assertTrue(why.contains("cannot be asked (for 2000 ms after"), why);

            now.addAndGet(TimeUnit.MILLISECONDS.toNanos(2000));
            assertNull(reducer.busyReason(HOST), "the wait is over: the next turn tries READs again");
            // Back, but the job is not known yet (a restarted service before the job's tokens are back).
            try (RdmaNode unknowing = service(port, false)) {
                IOException refused = assertThrows(IOException.class, () -> echo(reducer, service, "r3"));
                assertTrue(refused.getMessage().contains("unknown job or wrong secret"), refused.getMessage());
                assertTrue(reducer.cannotAsk(HOST, service, refused), "a job not known yet is asked again later");
                assertTrue(reducer.busyReason(HOST).contains("(for 4000 ms after"), reducer.busyReason(HOST));
            }
            now.addAndGet(TimeUnit.MILLISECONDS.toNanos(4000));
            assertNull(reducer.busyReason(HOST));
            try (RdmaNode back = service(port, true)) {
                assertEquals("r4", echo(reducer, service, "r4"), "READs again from the restarted service");
                reducer.answered(HOST);
                assertNull(reducer.busyReason(HOST));
                assertNull(reducer.httpReason(HOST));
                assertEquals(0, reducer.hostsViaHttp());
                // A later outage waits the first wait again.
            }
            IOException again = assertThrows(IOException.class, () -> echo(reducer, service, "r5"));
            assertTrue(reducer.cannotAsk(HOST, service, again));
            assertTrue(reducer.busyReason(HOST).contains("(for 2000 ms after"), reducer.busyReason(HOST));
        }
    }

    @Test
    @Timeout(60)
    void shouldFetchOverHttpForGoodWhenSomethingElseAnswersOnTheServicePort() throws Exception {
        try (ServerSocket other = new ServerSocket(0, 5, InetAddress.getLoopbackAddress())) {
            Thread answering = new Thread(() -> {
                try (Socket s = other.accept(); OutputStream out = s.getOutputStream()) {
                    out.write("HTTP/1.1 400 Bad Request\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
                    out.flush();
                    s.getInputStream().read(new byte[256]);
                } catch (IOException ignored) {
                    // the reducer hung up
                }
            });
            answering.setDaemon(true);
            answering.start();
            try (ReducerClient reducer = new ReducerClient(conf(other.getLocalPort()), JOB, TOKEN)) {
                NodeAddress service = reducer.serviceOf(HOST);
                IOException notOurs = assertThrows(IOException.class, () -> echo(reducer, service, "r"));
                assertTrue(ReducerClient.staysSo(notOurs), notOurs.toString());
                assertFalse(reducer.cannotAsk(HOST, service, notOurs), "another protocol does not change");
                assertNotNull(reducer.httpReason(HOST));
                assertNull(reducer.busyReason(HOST));
                assertEquals(1, reducer.hostsViaHttp());
            }
            answering.join(5000);
        }
    }
}
