package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.mapreduce.EchoService.echo;

import java.io.IOException;
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
 * A NodeManager's service that is busy (here: the job holds its share of the node's connections) is not given up
 * on: the reducer fetches that host's outputs of this turn over HTTP and tries READs again after a wait that grows
 * while the service stays busy (as for a service that is down or does not know the job:
 * {@link ReducerServiceRestartTest}). Real sockets, no cluster; the back-off's clock is the test's.
 */
class ReducerBusyServiceTest {
    private static final String JOB = "job_1700000000000_0007";
    private static final byte[] TOKEN = "shuffle-secret-of-job-7".getBytes(StandardCharsets.UTF_8);

    private static RdmaShuffleConf conf(int port) {
        return EchoService.conf(port, "spark.shuffle.rdma.maxConnectionsPerRealm", "1");
    }

    @Test
    @Timeout(60)
    void shouldFetchOverHttpForAWhileAndReadAgainLaterWhenTheServiceIsBusy() throws Exception {
        AtomicLong now = new AtomicLong(1_000_000_000L);
        MapHost host = new MapHost("127.0.0.1:13562", "http://127.0.0.1:13562/mapOutput?job=x&reduce=0&map=");
        try (RdmaNode nodeManager = EchoService.open(conf(0), JOB, TOKEN)) {
            int port = nodeManager.localAddress().port();
            ReducerClient holder = new ReducerClient(conf(port), JOB, TOKEN);
            try (ReducerClient reducer = new ReducerClient(conf(port), JOB, TOKEN, now::get, () -> 0.5)) {
                NodeAddress service = reducer.serviceOf(host);
                assertEquals("hold", echo(holder, service, "hold")); // the job's one connection on the node

                IOException busy = assertThrows(IOException.class, () -> echo(reducer, service, "r1"));
                assertInstanceOf(PeerBusyException.class, busy, "busy keeps its type through the adapter");
                assertTrue(busy.getMessage().contains("mapreduce.shuffle.rdma.maxConnectionsPerRealm"),
                        busy.getMessage());
                assertTrue(reducer.cannotAsk(host, service, busy), "busy is worth another try");
                assertNull(reducer.httpReason(host), "a busy service is not given up on");
                assertEquals(0, reducer.hostsViaHttp());
                String why = reducer.busyReason(host);
                assertNotNull(why, "this turn of the host goes over HTTP");
                assertTrue(why.contains("is busy (for 2000 ms after"), why);

                now.addAndGet(TimeUnit.MILLISECONDS.toNanos(1999));
                assertNotNull(reducer.busyReason(host), "still waiting");
                now.addAndGet(TimeUnit.MILLISECONDS.toNanos(1));
                assertNull(reducer.busyReason(host), "the wait is over: READs are tried again");
                // Still busy: the wait doubles.
                assertTrue(reducer.cannotAsk(host, service,
                        assertThrows(PeerBusyException.class, () -> echo(reducer, service, "r2"))));
                now.addAndGet(TimeUnit.MILLISECONDS.toNanos(3999));
                assertTrue(reducer.busyReason(host).contains("is busy (for 4000 ms after"), reducer.busyReason(host));
                now.addAndGet(TimeUnit.MILLISECONDS.toNanos(1));
                assertNull(reducer.busyReason(host));

                // The job's other connection goes: the next try gets in, and READs go on from this host.
                holder.close();
                String answer = null;
                while (answer == null) { // the node sees the holder's end of stream on its next wakeup
                    try {
                        answer = echo(reducer, service, "r3");
                    } catch (PeerBusyException stillBusy) {
                        Thread.sleep(20);
                    }
                }
                assertEquals("r3", answer);
                reducer.answered(host);
                assertNull(reducer.busyReason(host));
                assertNull(reducer.httpReason(host));
                assertEquals(0, reducer.hostsViaHttp());
            } finally {
                holder.close();
            }
        }
    }
}
