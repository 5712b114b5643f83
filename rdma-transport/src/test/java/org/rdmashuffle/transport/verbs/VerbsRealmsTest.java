package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.NodeOptions;

/**
 * Realms are not served by the verbs provider (over {@link EmulatedVerbs}, so it runs where no RDMA device
 * exists): a verbs node refuses options with realms, and its control messages reach the application's
 * handler with no realm.
 */
class VerbsRealmsTest {
    private static final RdmaShuffleConf CONF = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "verbs",
            "spark.shuffle.rdma.verbs.maxQpReadAtoms", "16", "spark.shuffle.rdma.verbs.completionQueueSize", "256"));

    @Test
    void shouldRefuseToOpenWhenOptionsUseRealms() {
        for (NodeOptions options : new NodeOptions[] {NodeOptions.loopback().withSecrets(realm -> null),
                NodeOptions.loopback().withRealm("job_1_0002", new byte[] {1})}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> new VerbsNode(CONF, options, new EmulatedVerbs().choice()));
            assertTrue(e.getMessage().contains("realms (a secret per job) are served by the tcp provider only"),
                    e.getMessage());
        }
    }

    @Test
    @Timeout(60)
    void shouldGiveTheControlHandlerNoRealm() throws Exception {
        ControlHandler realmEcho = new ControlHandler() {
            @Override
            public ByteBuffer onMessage(ByteBuffer request) {
                throw new AssertionError("the node calls the handler with the connection's realm");
            }

            @Override
            public ByteBuffer onMessage(String realm, ByteBuffer request) {
                return ByteBuffer.wrap(String.valueOf(realm).getBytes(StandardCharsets.UTF_8));
            }
        };
        try (VerbsNode server = new VerbsNode(CONF, NodeOptions.loopback().withControlHandler(realmEcho),
                new EmulatedVerbs().choice());
             VerbsNode client = new VerbsNode(CONF, NodeOptions.loopback(), new EmulatedVerbs().choice())) {
            ByteBuffer reply = client.connect(server.localAddress())
                    .call(ByteBuffer.wrap(new byte[] {42})).get(30, TimeUnit.SECONDS);
            assertEquals("null", StandardCharsets.UTF_8.decode(reply).toString());
        }
    }
}
