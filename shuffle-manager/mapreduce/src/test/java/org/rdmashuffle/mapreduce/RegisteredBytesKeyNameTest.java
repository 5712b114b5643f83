package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.JobID;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.shuffle.core.serve.MapOutputServer;
import org.rdmashuffle.transport.NodeAddress;

/**
 * A map output left unregistered because it would pass {@code maxRegisteredOutputBytes} is said, on the
 * NodeManager, in a WARN naming the key its admin sets ({@code mapreduce.shuffle.rdma.*}), never a Spark key.
 */
class RegisteredBytesKeyNameTest {
    @TempDir
    Path dir;

    @Test
    @Timeout(120)
    void shouldNameTheMapReduceKeyWhenAnOutputWouldPassMaxRegisteredOutputBytes() throws Exception {
        int port = ServiceFixture.freePort();
        Path local = Files.createDirectories(dir.resolve("nm1"));
        Configuration conf = ServiceFixture.nodeManagerConf(local, port);
        conf.set(MapReduceRdmaConf.PREFIX + "maxRegisteredOutputBytes", "1k"); // a table of one map fits, not its output
        RdmaShuffleHandler service = ServiceFixture.started(conf);
        try (LoggedWarnings log = LoggedWarnings.of(MapOutputServer.class)) {
            byte[] secret = "s1".getBytes();
            JobID job = ServiceFixture.initJob(service, "alice", 1, secret);
            byte[][] parts = ServiceFixture.writeMapOutput(local, "alice", job, 0, 0, 4, 35);
            long bytes = 0;
            for (byte[] p : parts) {
                bytes += p.length;
            }
            assertTrue(bytes > 1024, "the output passes the cap: " + bytes);
            try (ReducerClient c = new ReducerClient(MapReduceRdmaConf.from(conf), job.toString(), secret)) {
                RegisterProtocol.Reply r = RegisterProtocol.parseReply(c.call(new NodeAddress("127.0.0.1", port,
                        service.server().address().provider()), RegisterProtocol.encode(new RegisterProtocol.Request(1,
                        4, 0, new MapAttempt[] {new MapAttempt(0, 0)}))), 1);
                assertEquals(RegisterProtocol.OK, r.status(), r.reason());
            }
            String all = String.join("\n", log.messages());
            assertTrue(all.contains(MapReduceRdmaConf.PREFIX + "maxRegisteredOutputBytes (1024 bytes)"), all);
            assertFalse(all.contains("spark."), all);
        } finally {
            service.stop();
        }
    }
}
