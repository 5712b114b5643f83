package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.HandshakeRefusedException;
import org.rdmashuffle.transport.NodeOptions;

/**
 * A handshake refused because one side authenticates and the other does not names Spark's key only on nodes
 * configured as Spark's ({@code spark.shuffle.rdma.*}): a NodeManager's service and its reducers, configured with
 * {@code mapreduce.shuffle.rdma.*}, say it without a {@code spark.} key, in the client's exception and in the
 * server's log line alike.
 */
class TcpAuthMismatchKeyNamesTest {
    private static final String SPARK = RdmaShuffleConf.PREFIX;
    private static final String MAPREDUCE = "mapreduce.shuffle.rdma.";

    private static RdmaShuffleConf conf(String prefix) {
        Map<String, String> m = new HashMap<>(Map.of(SPARK + "provider", "tcp", SPARK + "connectRetries", "0"));
        return new RdmaShuffleConf(m, prefix);
    }

    @ParameterizedTest
    @ValueSource(strings = {MAPREDUCE, SPARK})
    @Timeout(60)
    void shouldNameSparksAuthenticationKeyOnlyOnSparkNodesWhenOneSideAuthenticatesAndTheOtherNot(String prefix)
            throws Exception {
        PrintStream err = System.err;
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        System.setErr(new PrintStream(log, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err
        String client;
        try (TcpNode withSecret = new TcpNode(conf(prefix), NodeOptions.loopback()
                .withSecret("the-shared-secret".getBytes(StandardCharsets.UTF_8)));
             TcpNode without = new TcpNode(conf(prefix), NodeOptions.loopback())) {
            HandshakeRefusedException e = assertThrows(HandshakeRefusedException.class,
                    () -> without.connect(withSecret.localAddress()));
            assertEquals(HandshakeRefusedException.Reason.AUTH_MISMATCH, e.reason());
            assertFalse(e.mayChange());
            client = e.getMessage();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (!log.toString(StandardCharsets.UTF_8).contains("refused connection from ")) {
                assertTrue(System.nanoTime() < deadline, "the refusal not logged within 20 s:\n" + log);
                Thread.sleep(20);
            }
        } finally {
            System.setErr(err);
        }
        String lines = log.toString(StandardCharsets.UTF_8);
        String server = lines.substring(lines.indexOf("refused connection from "));
        for (String said : new String[] {client, server}) {
            if (prefix.equals(SPARK)) {
                assertTrue(said.contains("one side has spark.authenticate on and the other off"), said);
            } else {
                assertTrue(said.contains("authentication is configured differently on the two sides"), said);
                assertFalse(said.contains("spark."), "a MapReduce node names a Spark key: " + said);
            }
        }
    }
}
