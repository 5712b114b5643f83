package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.Registrar;
import org.rdmashuffle.pool.Registration;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RegionAccess;

/** The verbs node's sink registrar (the transport's shared {@code SinkRegistrar}) over {@link EmulatedVerbs}. */
class VerbsSinkRegistrarTest {
    private static final RdmaShuffleConf CONF = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "verbs",
            "spark.shuffle.rdma.verbs.maxQpReadAtoms", "16", "spark.shuffle.rdma.verbs.completionQueueSize", "256"));

    @Test
    @Timeout(60)
    void shouldRegisterReadSinksWhileOpenAndRefuseWithIllegalStateWhenNodeIsClosed() throws Exception {
        VerbsNode node = new VerbsNode(CONF, NodeOptions.loopback(), new EmulatedVerbs().choice());
        Registrar registrar;
        try (node) {
            registrar = node.sinkRegistrar();
            Registration r = registrar.register(ByteBuffer.allocateDirect(4096));
            VerbsRegion region = (VerbsRegion) r;
            assertEquals(RegionAccess.READ_SINK, region.access());
            assertEquals(4096, region.length());
            assertTrue(region.isOpen());
            assertEquals(1, node.stats().registeredRegions());
            r.close();
            assertFalse(region.isOpen());
            assertEquals(0, node.stats().registeredRegions());
        }
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> registrar.register(ByteBuffer.allocateDirect(4096)));
        assertTrue(e.getMessage().contains("is closed"), e.getMessage());
    }
}
