package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.JobID;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.transport.NodeAddress;

/**
 * A job's output table is sized by the map count its reducers claim (32 bytes per map): the service holds tables
 * within {@code maxTableBytes}, one job's within half of it, charged to {@code maxRegisteredOutputBytes} too; a job
 * whose table does not fit is answered {@link RegisterProtocol#NO_ROOM} (served over HTTP there).
 */
@Timeout(120)
class RegisterTableBoundTest {
    @TempDir
    Path dir;
    private Configuration conf;
    private RdmaShuffleHandler service;
    private int port;

    private void start(String key, String value) throws Exception {
        port = ServiceFixture.freePort();
        Files.createDirectories(dir.resolve("nm1"));
        conf = ServiceFixture.nodeManagerConf(dir.resolve("nm1"), port);
        conf.set(key, value);
        service = ServiceFixture.started(conf);
    }

    @AfterEach
    void stop() {
        if (service != null) {
            service.stop();
        }
    }

    private static long direct() {
        for (BufferPoolMXBean b : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
            if (b.getName().equals("direct")) {
                return b.getMemoryUsed();
            }
        }
        return -1;
    }

    /** Job {@code number}'s reducer 0 claims {@code numMaps} maps and asks for the last one. */
    private RegisterProtocol.Reply register(int number, int numMaps) throws Exception {
        byte[] secret = ("s" + number).getBytes();
        JobID job = ServiceFixture.initJob(service, "alice", number, secret);
        try (ReducerClient c = new ReducerClient(MapReduceRdmaConf.from(conf), job.toString(), secret)) {
            return RegisterProtocol.parseReply(c.call(new NodeAddress("127.0.0.1", port,
                    service.server().address().provider()), RegisterProtocol.encode(new RegisterProtocol.Request(numMaps,
                    1, 0, new MapAttempt[] {new MapAttempt(numMaps - 1, 0)}))), 1);
        }
    }

    @Test
    void shouldServeAJobOverHttpWhenTheTableItsReducerClaimsWouldPassMaxTableBytes() throws Exception {
        start(MapReduceRdmaConf.MAX_TABLE_BYTES, "8m");
        long before = direct();
        for (int j = 1; j <= 4; j++) { // 32 MiB each, claimed; no output of theirs on this NodeManager
            RegisterProtocol.Reply r = register(j, RegisterProtocol.MAX_MAPS);
            assertEquals(RegisterProtocol.NO_ROOM, r.status(), "a table of 2^20 maps was registered");
            assertTrue(r.reason().contains(MapReduceRdmaConf.MAX_TABLE_BYTES), r.reason());
        }
        assertEquals(0, service.server().outputs().tableBytes());
        long grown = direct() - before;
        assertTrue(grown < 8L << 20, "the NodeManager holds " + grown + " more bytes of direct memory for 4 jobs"
                + " that registered nothing");

        RegisterProtocol.Reply small = register(5, 1000); // 32,000 bytes: within the bound
        assertEquals(RegisterProtocol.OK, small.status(), small.reason());
        assertEquals(RegisterProtocol.MISSING, small.maps()[0].state());
        assertEquals(32_000, service.server().outputs().tableBytes());
    }

    @Test
    void shouldRefuseOneJobsClaimPastHalfTheBoundWhileAnotherJobStillFitsWhenMaxTableBytesIsSet() throws Exception {
        start(MapReduceRdmaConf.MAX_TABLE_BYTES, "1m"); // 32,768 maps in all, 16,384 of one job
        RegisterProtocol.Reply greedy = register(1, 20_000); // 640,000 bytes: fits the bound, not one job's share
        assertEquals(RegisterProtocol.NO_ROOM, greedy.status(), "one job's claim took more than half the bound");
        assertTrue(greedy.reason().contains("half of " + MapReduceRdmaConf.MAX_TABLE_BYTES), greedy.reason());
        assertEquals(0, service.server().outputs().tableBytes());

        for (int j = 2; j <= 3; j++) { // 512 KiB each: a job's share, and two fill the bound
            RegisterProtocol.Reply r = register(j, 16_384);
            assertEquals(RegisterProtocol.OK, r.status(), r.reason());
        }
        assertEquals(1L << 20, service.server().outputs().tableBytes());
        RegisterProtocol.Reply full = register(4, 1);
        assertEquals(RegisterProtocol.NO_ROOM, full.status(), "a table past the bound was registered");
        assertTrue(full.reason().contains("held by other jobs"), full.reason());
    }

    @Test
    void shouldRefuseAMaxTableBytesOfLessThanOneMapWhenConfigured() {
        Configuration c = new Configuration(false);
        c.set(MapReduceRdmaConf.MAX_TABLE_BYTES, "16");
        org.rdmashuffle.conf.ConfigException e = org.junit.jupiter.api.Assertions.assertThrows(
                org.rdmashuffle.conf.ConfigException.class, () -> MapReduceRdmaConf.from(c));
        assertTrue(e.getMessage().contains(MapReduceRdmaConf.MAX_TABLE_BYTES + "=16"), e.getMessage());
        c.set(MapReduceRdmaConf.MAX_TABLE_BYTES, "1m");
        assertEquals(1L << 20, MapReduceRdmaConf.maxTableBytes(c));
    }

    @Test
    void shouldChargeOutputTablesToMaxRegisteredOutputBytesWhenItIsSet() throws Exception {
        start(MapReduceRdmaConf.PREFIX + "maxRegisteredOutputBytes", "1m");
        RegisterProtocol.Reply r = register(1, 1 << 16); // 2 MiB of table
        assertEquals(RegisterProtocol.NO_ROOM, r.status(), "a table past the registered-bytes cap was registered");
        assertTrue(r.reason().contains(MapReduceRdmaConf.PREFIX + "maxRegisteredOutputBytes"), r.reason());
        assertEquals(0, service.server().outputs().tableBytes());

        RegisterProtocol.Reply small = register(2, 1000);
        assertEquals(RegisterProtocol.OK, small.status(), small.reason());
        assertEquals(32_000, service.server().outputs().tableBytes());
    }
}
