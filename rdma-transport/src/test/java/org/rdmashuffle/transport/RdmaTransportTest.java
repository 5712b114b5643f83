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
