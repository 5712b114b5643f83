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
    void shouldOpenATcpNodeServingRealmsWhenProviderIsAutoAndOptionsUseRealms() throws Exception {
        // Decided from the options, before the machine is probed: even where verbs could run, auto picks tcp.
        NodeOptions resolver = NodeOptions.loopback().withSecrets(realm -> null);
        NodeOptions realm = NodeOptions.loopback().withRealm("job_1_0002", new byte[] {1, 2, 3});
        assertEquals(java.util.Optional.of(NodeOptions.REALMS_ON_TCP_ONLY), RdmaTransport.verbsCannotServe(resolver));
        assertEquals(java.util.Optional.of(NodeOptions.REALMS_ON_TCP_ONLY), RdmaTransport.verbsCannotServe(realm));
        assertEquals(java.util.Optional.empty(), RdmaTransport.verbsCannotServe(NodeOptions.loopback()));
        assertEquals(java.util.Optional.empty(),
                RdmaTransport.verbsCannotServe(NodeOptions.loopback().withSecret(new byte[] {1})));
        // And the tcp node it opens serves the realms: the resolver node refuses a client that names none.
        try (RdmaNode server = RdmaTransport.open(RdmaShuffleConf.defaults(), resolver);
             RdmaNode client = RdmaTransport.open(RdmaShuffleConf.defaults(), NodeOptions.loopback())) {
            assertEquals("tcp", server.localAddress().provider());
            TransportException e = assertThrows(TransportException.class, () -> client.connect(server.localAddress()));
            assertTrue(e.getMessage().contains("named no realm"), e.getMessage());
        }
    }

    @Test
    void shouldRefuseRealmsNamingTheTcpProviderWhenProviderIsVerbs() {
        RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "verbs"));
        for (NodeOptions options : new NodeOptions[] {NodeOptions.loopback().withSecrets(realm -> null),
                NodeOptions.loopback().withRealm("job_1_0002", new byte[] {1})}) {
            TransportException e = assertThrows(TransportException.class, () -> RdmaTransport.open(conf, options));
            assertEquals("spark.shuffle.rdma.provider=verbs, but realms (a secret per job) are served by the tcp "
                    + "provider only. Use provider=tcp or auto.", e.getMessage());
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
