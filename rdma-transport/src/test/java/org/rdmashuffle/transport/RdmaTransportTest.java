package org.rdmashuffle.transport;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;

class RdmaTransportTest {

    @Test
    @Timeout(30)
    void shouldFallBackToTcpWhenProviderIsAutoAndVerbsCannotRun() throws Exception {
        try (RdmaNode n = RdmaTransport.open(RdmaShuffleConf.defaults(), NodeOptions.loopback())) {
            assertEquals("tcp", n.localAddress().provider());
        }
    }

    @Test
    void shouldFailNamingWhatIsMissingWhenProviderIsVerbs() {
        RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "verbs"));
        TransportException e = assertThrows(TransportException.class,
                () -> RdmaTransport.open(conf, NodeOptions.loopback()));
        assertTrue(e.getMessage().startsWith("spark.shuffle.rdma.provider=verbs, but the verbs provider cannot run"),
                e.getMessage());
        assertTrue(VerbsSupport.missing().isPresent(), "this machine has no RDMA; the probe must say so");
        assertTrue(e.getMessage().contains(VerbsSupport.missing().get()), e.getMessage());
    }

    @Test
    @Timeout(30)
    void shouldOpenATcpNodeServingRealmsWhenProviderIsAutoAndVerbsWouldRunThroughDisni() throws Exception {
        NodeOptions resolver = NodeOptions.loopback().withSecrets(realm -> null);
        NodeOptions realm = NodeOptions.loopback().withRealm("job_1_0002", new byte[] {1, 2, 3});
        RdmaShuffleConf disni = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.verbs.api", "disni"));
        RdmaShuffleConf ffm = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.verbs.api", "ffm"));
        String why = "verbs: realms (a secret per job) need rdma_cm private data, which DiSNI 2.1 drops; use "
                + "spark.shuffle.rdma.verbs.api=ffm on Java 22+";
        assertEquals(java.util.Optional.of(why), RdmaTransport.verbsCannotServe(disni, resolver));
        assertEquals(java.util.Optional.of(why), RdmaTransport.verbsCannotServe(disni, realm));
        assertEquals(java.util.Optional.empty(), RdmaTransport.verbsCannotServe(ffm, resolver));
        assertEquals(java.util.Optional.empty(), RdmaTransport.verbsCannotServe(ffm, realm));
        assertEquals(java.util.Optional.empty(), RdmaTransport.verbsCannotServe(disni, NodeOptions.loopback()));
        assertEquals(java.util.Optional.empty(),
                RdmaTransport.verbsCannotServe(disni, NodeOptions.loopback().withSecret(new byte[] {1})));
        // auto leads to java.lang.foreign where it can run (Java 22+ with rdma-core), else to DiSNI
        boolean ffmRuns = org.rdmashuffle.transport.verbs.VerbsApis.apiMissing(RdmaShuffleConf.VerbsApi.FFM).isEmpty();
        assertEquals(ffmRuns ? java.util.Optional.empty() : java.util.Optional.of(why),
                RdmaTransport.verbsCannotServe(RdmaShuffleConf.defaults(), resolver));
        // And the tcp node auto opens serves the realms: the resolver node refuses a client that names none.
        try (RdmaNode server = RdmaTransport.open(disni, resolver);
             RdmaNode client = RdmaTransport.open(RdmaShuffleConf.defaults(), NodeOptions.loopback())) {
            assertEquals("tcp", server.localAddress().provider());
            TransportException e = assertThrows(TransportException.class, () -> client.connect(server.localAddress()));
            assertTrue(e.getMessage().contains("named no realm"), e.getMessage());
        }
    }

    @Test
    @Timeout(30)
    void shouldTryFollowingPortsWhenConfiguredPortIsTaken() throws Exception {
        try (RdmaNode first = RdmaTransport.open(RdmaShuffleConf.defaults(), NodeOptions.loopback())) {
            int taken = first.localAddress().port();
            RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.port", Integer.toString(taken),
                    "spark.shuffle.rdma.port.maxRetries", "20"));
            try (RdmaNode second = RdmaTransport.open(conf, NodeOptions.loopback())) {
                int p = second.localAddress().port();
                assertTrue(p > taken && p <= taken + 20, "bound " + p + " after " + taken);
            }
            RdmaShuffleConf none = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.port", Integer.toString(taken),
                    "spark.shuffle.rdma.port.maxRetries", "0"));
            TransportException e = assertThrows(TransportException.class,
                    () -> RdmaTransport.open(none, NodeOptions.loopback()));
            assertTrue(e.getMessage().contains("spark.shuffle.rdma.port.maxRetries"), e.getMessage());
        }
    }
}
