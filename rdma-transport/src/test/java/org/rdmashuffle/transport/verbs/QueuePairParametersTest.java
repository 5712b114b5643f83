package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.conf.ConfigException;
import org.rdmashuffle.conf.RdmaShuffleConf;

/** The connection parameters of verbs queue pairs, computed without a device. */
class QueuePairParametersTest {

    private static QueuePairParameters of(Map<String, String> settings) {
        return QueuePairParameters.of(new RdmaShuffleConf(settings));
    }

    @Test
    void shouldConnectWithSevenRetriesAndUnlimitedRnrRetriesWhenNothingIsSet() {
        QueuePairParameters p = of(Map.of());
        assertEquals(7, p.retryCount());
        assertEquals(7, p.rnrRetryCount());
        assertEquals(16, p.readDepth());
    }

    @Test
    void shouldUseConfiguredRetryCountsWhenSet() {
        QueuePairParameters p = of(Map.of("spark.shuffle.rdma.verbs.retryCount", "3",
                "spark.shuffle.rdma.verbs.rnrRetryCount", "0"));
        assertEquals(3, p.retryCount());
        assertEquals(0, p.rnrRetryCount());
    }

    @Test
    void shouldNameKeyAndRangeWhenRetryCountIsAboveSeven() {
        ConfigException e = assertThrows(ConfigException.class,
                () -> of(Map.of("spark.shuffle.rdma.verbs.retryCount", "8")));
        String p = e.problems().get(0);
        assertTrue(p.contains("spark.shuffle.rdma.verbs.retryCount"), p);
        assertTrue(p.contains("from 0 to 7"), p);
    }

    @Test
    void shouldNameKeyAndRangeWhenRnrRetryCountIsNegative() {
        ConfigException e = assertThrows(ConfigException.class,
                () -> of(Map.of("spark.shuffle.rdma.verbs.rnrRetryCount", "-1")));
        String p = e.problems().get(0);
        assertTrue(p.contains("spark.shuffle.rdma.verbs.rnrRetryCount"), p);
        assertTrue(p.contains("from 0 to 7"), p);
    }

    @Test
    void shouldRejectRetryCountsWhenBuiltOutsideTheThreeBitRange() {
        assertThrows(IllegalArgumentException.class, () -> new QueuePairParameters(16, 8, 7));
        assertThrows(IllegalArgumentException.class, () -> new QueuePairParameters(16, 7, -1));
        assertThrows(IllegalArgumentException.class, () -> new QueuePairParameters(0, 7, 7));
    }

    @Test
    void shouldLowerReadDepthToWhatRdmaCmCarriesWhenConfiguredAboveIt() {
        QueuePairParameters p = of(Map.of("spark.shuffle.rdma.verbs.maxQpReadAtoms", "1024"));
        assertEquals(255, p.readDepth());
    }

    @Test
    void shouldTakeTheSmallestLimitWhenComputingTheReadWindow() {
        QueuePairParameters p = new QueuePairParameters(16, 7, 7);
        assertEquals(16, p.readWindow(64, 128)); // this node's depth
        assertEquals(8, p.readWindow(64, 8)); // the peer's depth
        assertEquals(4, p.readWindow(4, 128)); // maxReadsInFlightPerPeer
        assertEquals(16, p.maxReadWindow(64));
        assertEquals(4, p.maxReadWindow(4));
    }

    @Test
    void shouldNeverExceedTheLocalMaximumWhenThePeerAcceptsMore() {
        QueuePairParameters p = new QueuePairParameters(16, 7, 7);
        for (int peer = 1; peer <= 255; peer++) {
            int w = p.readWindow(64, peer);
            assertTrue(w <= p.maxReadWindow(64) && w <= peer && w >= 1, "peer " + peer + " window " + w);
        }
    }

    @Test
    void shouldRejectThePeersDepthWhenItIsNoDepth() {
        QueuePairParameters p = new QueuePairParameters(16, 7, 7);
        assertThrows(IllegalArgumentException.class, () -> p.readWindow(64, 0));
        assertThrows(IllegalArgumentException.class, () -> p.readWindow(64, 256));
    }

    @Test
    void shouldSayTheWindowWasLoweredWhenThePeerAcceptsFewerReads() {
        String d = new QueuePairParameters(16, 7, 7).describe(64, 8);
        assertTrue(d.contains("READs in flight 8 = min(maxReadsInFlightPerPeer 64, verbs.maxQpReadAtoms 16, "
                + "the peer's 8)"), d);
        assertTrue(d.contains("lowered from 16 to the peer's READ depth"), d);
    }

    @Test
    void shouldStateEveryConnectionParameterWhenDescribed() {
        String d = new QueuePairParameters(16, 5, 7).describe(64, 16);
        assertTrue(d.contains("retry_count=5, rnr_retry_count=7 (unlimited)"), d);
        assertTrue(d.contains("initiator_depth=device max_qp_rd_atom, responder_resources=device max_qp_rd_atom"), d);
        assertTrue(d.contains("READs in flight 16 "), d);
        assertFalse(d.contains("lowered"), d);
    }
}
