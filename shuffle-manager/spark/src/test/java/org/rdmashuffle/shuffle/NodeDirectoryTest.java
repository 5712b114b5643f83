package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.rpc.RpcEnv;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.shuffle.core.directory.PeerDirectory;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.TransportChoice;

/** The directory over a real Spark driver's RPC environment. */
class NodeDirectoryTest {

    @Test
    @Timeout(120)
    void shouldAnswerLookupsOverSparkRpcWhenExecutorsRegister() throws Exception {
        SparkConf conf = new SparkConf().setMaster("local[1]").setAppName("node-directory-test")
                .set("spark.ui.enabled", "false").set("spark.driver.host", "127.0.0.1")
                .set("spark.driver.bindAddress", "127.0.0.1");
        try (JavaSparkContext sc = new JavaSparkContext(conf)) {
            RpcEnv rpc = SparkEnv.get().rpcEnv();
            NodeDirectory.Endpoint endpoint = NodeDirectory.Endpoint.start(rpc, id -> true);
            NodeDirectory.Client exec1 = new NodeDirectory.Client(SparkEnv.get().conf(), rpc);
            NodeDirectory.Client reducer = new NodeDirectory.Client(SparkEnv.get().conf(), rpc);
            NodeAddress a = new NodeAddress("10.200.0.2", 40123, "tcp");
            exec1.register("1", a, 11);
            assertEquals(1, endpoint.size());
            NodeAddress found = reducer.lookup("1");
            assertEquals(a, found);
            assertSame(found, reducer.lookup("1"), "second lookup comes from the cache");
            assertNull(reducer.lookup("7"));
            exec1.forget("1");
            assertSame(found, reducer.lookup("1"), "the reducer's cache still names the withdrawn node");
            PeerDirectory.Found now = reducer.recheck("1"); // a READ to it failed: ask afresh before blaming it
            assertNull(now.address(), "a withdrawn node is still in the directory");
            assertFalse(now.removed());
            assertNull(reducer.lookup("1"));
            assertEquals(0, endpoint.size());
            NodeAddress restarted = new NodeAddress("10.200.0.2", 40124, "tcp");
            exec1.register("1", restarted, 12); // a new node after the old one failed
            assertEquals(restarted, reducer.recheck("1").address());
            exec1.register("1", restarted, 13); // and again, on the same (fixed) port
            assertFalse(reducer.recheck("1").names(restarted, 12), "a node started again at the same address is "
                    + "taken for the one before it");
            assertTrue(reducer.recheck("1").names(restarted, 13));
            assertEquals(restarted, reducer.lookup("1"), "the fresh answer is cached");
            exec1.forget("1");
            reducer.invalidate("1");

            // Spark removes executor 2: readers that cached its node learn it when they ask again, and a
            // registration arriving late does not bring it back.
            NodeAddress b = new NodeAddress("10.200.0.3", 40124, "tcp");
            NodeDirectory.Client exec2 = new NodeDirectory.Client(SparkEnv.get().conf(), rpc);
            exec2.register("2", b, 21);
            assertEquals(b, reducer.lookup("2"));
            // Which transport each runs, for the driver's summary.
            TransportChoice siw = new TransportChoice("verbs", "siw0", "java.lang.foreign", "provider=auto", false);
            exec1.reportTransport("1", TransportChoice.tcp("provider=tcp", false));
            exec2.reportTransport("2", siw);
            String both = "2 executors: 1 verbs (on siw0: 1), 1 tcp (provider=tcp: 1)";
            assertEquals(both, endpoint.transportSummary());
            assertFalse(reducer.find("7").removed(), "an executor never seen is unknown, not removed");
            endpoint.executorRemoved("2");
            assertEquals("1 executor: 0 verbs, 1 tcp (provider=tcp: 1)", endpoint.transportSummary());
            exec2.reportTransport("2", siw);
            assertEquals("1 executor: 0 verbs, 1 tcp (provider=tcp: 1)", endpoint.transportSummary(),
                    "a late report of a removed executor is ignored");
            assertEquals(both, endpoint.transportSummaryOverApplication(), "the application's life counts it");
            assertEquals(b, reducer.lookup("2"), "the cache answers until asked afresh");
            assertTrue(reducer.removed("2"));
            assertEquals(PeerDirectory.Found.GONE, reducer.find("2"));
            exec2.register("2", b, 21);
            assertTrue(reducer.removed("2"), "a late registration of a removed executor is ignored");
            NodeDirectory.Client other = new NodeDirectory.Client(SparkEnv.get().conf(), rpc);
            assertFalse(other.knownRemoved("2"));
            other.refreshRemoved();
            assertTrue(other.knownRemoved("2"), "a client learns removals in one ask");
            NodeAddress c = new NodeAddress("10.200.0.4", 40125, "tcp");
            new NodeDirectory.Client(SparkEnv.get().conf(), rpc).register("4", c, 41);
            NodeDirectory.Client third = new NodeDirectory.Client(SparkEnv.get().conf(), rpc);
            assertEquals(c, third.lookup("4"));
            endpoint.executorRemoved("4");
            assertEquals(java.util.List.of(c), third.refreshRemoved(), "the cached node of a removed executor is "
                    + "handed back to be forgotten");
            assertNull(third.lookup("4"));

            // A long application: only the last MAX_REMOVED removals are kept, and handed out in pages.
            for (int i = 0; i < NodeDirectory.Endpoint.MAX_REMOVED + 5; i++) {
                endpoint.executorRemoved("x" + i);
            }
            NodeDirectory.Client late = new NodeDirectory.Client(SparkEnv.get().conf(), rpc);
            late.refreshRemoved();
            assertFalse(late.knownRemoved("x4"), "the oldest removals are forgotten");
            assertTrue(late.knownRemoved("x5"));
            assertTrue(late.knownRemoved("x" + (NodeDirectory.Endpoint.MAX_REMOVED + 4)));
            assertEquals(0, endpoint.size());
            endpoint.stop();
        }
    }

    @Test
    @Timeout(120)
    void shouldNameTheHeldShufflesTheDriverNoLongerKnowsInBatches() throws Exception {
        SparkConf conf = new SparkConf().setMaster("local[1]").setAppName("node-directory-gone-test")
                .set("spark.ui.enabled", "false").set("spark.driver.host", "127.0.0.1")
                .set("spark.driver.bindAddress", "127.0.0.1");
        try (JavaSparkContext sc = new JavaSparkContext(conf)) {
            RpcEnv rpc = SparkEnv.get().rpcEnv();
            NodeDirectory.Endpoint.start(rpc, id -> id % 3 != 0); // the driver knows all but multiples of 3
            NodeDirectory.Client client = new NodeDirectory.Client(SparkEnv.get().conf(), rpc);
            assertEquals(0, client.goneShuffles(new int[0]).length);
            assertArrayEquals(new int[] {0, 9}, client.goneShuffles(new int[] {1, 0, 9, 4}));
            // More than one ask holds: the client splits, and the answer covers every id.
            int n = NodeDirectory.MAX_SHUFFLES_PER_ASK * 2 + 7;
            int[] held = java.util.stream.IntStream.range(0, n).toArray();
            assertArrayEquals(java.util.stream.IntStream.range(0, n).filter(id -> id % 3 == 0).toArray(),
                    client.goneShuffles(held));
        }
    }
}
