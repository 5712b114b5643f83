package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;

/**
 * A NodeManager's service reduced to its control channel, for reducer-side tests: a tcp node on the loopback
 * whose control handler sends each message back, and a reducer's {@link #echo} through it.
 */
final class EchoService {
    private static final ControlHandler ECHO = new ControlHandler() {
        @Override
        public ByteBuffer onMessage(ByteBuffer request) {
            return request;
        }

        @Override
        public ByteBuffer onMessage(String realm, ByteBuffer request) {
            return request;
        }
    };

    private EchoService() {
    }

    /** The tcp provider on {@code port} (0: any), no connect retries, and the test's {@code keysAndValues}. */
    static RdmaShuffleConf conf(int port, String... keysAndValues) {
        Map<String, String> settings = new HashMap<>(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.port", Integer.toString(port), "spark.shuffle.rdma.connectRetries", "0"));
        if (keysAndValues.length % 2 != 0) {
            throw new IllegalArgumentException("keys and values come in pairs: " + String.join(", ", keysAndValues));
        }
        for (int i = 0; i < keysAndValues.length; i += 2) {
            settings.put(keysAndValues[i], keysAndValues[i + 1]);
        }
        return new RdmaShuffleConf(settings);
    }

    /** An echoing service knowing {@code job} by {@code secret} (null: it knows no job). */
    static RdmaNode open(RdmaShuffleConf conf, String job, byte[] secret) throws IOException {
        return RdmaTransport.open(conf, NodeOptions.loopback().withControlHandler(ECHO)
                .withSecrets(asked -> job.equals(asked) ? secret : null));
    }

    /** {@code text} sent by {@code client} to {@code service}, and what came back. */
    static String echo(ReducerClient client, NodeAddress service, String text) throws Exception {
        ByteBuffer reply = client.call(service, ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8)));
        byte[] b = new byte[reply.remaining()];
        reply.get(b);
        return new String(b, StandardCharsets.UTF_8);
    }
}
