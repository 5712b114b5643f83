package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.server.api.ApplicationTerminationContext;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Block;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Request;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The NodeManager service without a cluster: NodeManager local dirs laid out as YARN lays them out (map outputs
 * under {@code output/<attempt>/}), the service started as a NodeManager starts it, each job handed to it with its
 * job token as YARN hands it ({@link ServiceFixture}), and reducers' clients over real sockets.
 */
class RdmaShuffleHandlerTest {
    private static final String USER = "alice";
    private static final int REDUCES = 4;
    private static final int MAPS = 3;

    @TempDir
    Path dir;
    private int port;
    private Configuration nmConf;
    private RdmaShuffleHandler service;

    @BeforeEach
    void startService() throws Exception {
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        nmConf = nodeManagerConf(dir.resolve("nm1"));
        service = ServiceFixture.started(nmConf);
    }

    @AfterEach
    void stopService() {
        service.stop();
    }

    private Configuration nodeManagerConf(Path localDir) throws IOException {
        Files.createDirectories(localDir);
        return ServiceFixture.nodeManagerConf(localDir, port);
    }

    /** Application {@code appNumber} initialized on {@code nm} as YARN does, with its job token of {@code secret}. */
    private static JobID initJob(RdmaShuffleHandler nm, int appNumber, byte[] secret) throws IOException {
        return ServiceFixture.initJob(nm, USER, appNumber, secret);
    }

    /** Writes map {@code map}'s attempt output of {@link #REDUCES} partitions of random bytes; returns them. */
    private static byte[][] writeMapOutput(Path localDir, JobID job, int map, int attempt, long seed) throws IOException {
        return ServiceFixture.writeMapOutput(localDir, USER, job, map, attempt, REDUCES, seed);
    }

    private ReducerClient reducer(JobID job, byte[] secret) throws IOException {
        return new ReducerClient(MapReduceRdmaConf.from(nmConf), job.toString(), secret);
    }

    private static RegisterProtocol.Reply register(ReducerClient client, NodeAddress service, int reduce,
                                                   MapAttempt... maps) throws Exception {
        ByteBuffer reply = client.call(service, RegisterProtocol.encode(
                new RegisterProtocol.Request(MAPS, REDUCES, reduce, maps)));
        return RegisterProtocol.parseReply(reply, maps.length);
    }

    private NodeAddress service(ReducerClient client) {
        return new NodeAddress("127.0.0.1", port, service.server().address().provider());
    }

    private static byte[] read(ReducerClient client, NodeAddress service, RegionDescriptor table, int map, int attempt,
                               int reduce) throws Exception {
        try (BlockFetcher f = client.newFetcher(1)) {
            f.add(new Request(service, table, map, attempt, reduce, reduce + 1));
            try (Block b = f.next()) {
                assertFalse(b.unregistered(), () -> "left to HTTP: " + b.viaEngineReason());
                byte[] bytes = new byte[(int) b.length()];
                b.bytes().get(bytes);
                return bytes;
            }
        }
    }

    @Test
    void shouldServeEachMapsPartitionToAReducerHoldingItsJobsSecretWithTheLengthsOfItsIndex() throws Exception {
        byte[] secret = "secret-of-job-1".getBytes();
        JobID job = initJob(service, 1, secret);
        byte[][][] outputs = new byte[MAPS][][];
        for (int m = 0; m < MAPS; m++) {
            outputs[m] = writeMapOutput(dir.resolve("nm1"), job, m, 0, 100 + m);
        }
        try (ReducerClient client = reducer(job, secret)) {
            NodeAddress at = service(client);
            for (int reduce = 0; reduce < REDUCES; reduce++) {
                RegisterProtocol.Reply reply = register(client, at, reduce, new MapAttempt(0, 0), new MapAttempt(1, 0),
                        new MapAttempt(2, 0));
                assertEquals(RegisterProtocol.OK, reply.status(), reply.reason());
                for (int m = 0; m < MAPS; m++) {
                    RegisterProtocol.MapState st = reply.maps()[m];
                    assertEquals(RegisterProtocol.PUBLISHED, st.state());
                    assertEquals(outputs[m][reduce].length, st.partLength());
                    assertEquals(outputs[m][reduce].length * 2L, st.rawLength(), "rawLength from the index");
                    assertArrayEquals(outputs[m][reduce], read(client, at, reply.table(), m, 0, reduce));
                }
            }
        }
        assertTrue(service.server().outputs().registeredOutputBytes() > 0);
    }

    @Test
    void shouldRefuseAReducerWithoutTheJobsSecretBeforeAnyByte() throws Exception {
        JobID job = initJob(service, 2, "the-real-secret".getBytes());
        writeMapOutput(dir.resolve("nm1"), job, 0, 0, 1);
        try (ReducerClient client = reducer(job, "a-guessed-secret".getBytes())) {
            IOException e = assertThrows(IOException.class,
                    () -> register(client, service(client), 0, new MapAttempt(0, 0)));
            assertTrue(e.getMessage().contains("auth") || e.getMessage().contains("secret")
                    || e.getMessage().contains("realm"), e.getMessage());
        }
        assertEquals(0, service.server().outputs().registeredOutputBytes(), "nothing registered for a refused peer");
    }

    @Test
    void shouldNotLetAReducerOfAnotherJobReadAJobsOutputsEvenWithItsTableDescriptor() throws Exception {
        byte[] secretA = "secret-A".getBytes();
        byte[] secretB = "secret-B".getBytes();
        JobID jobA = initJob(service, 3, secretA);
        JobID jobB = initJob(service, 4, secretB);
        byte[][] a = writeMapOutput(dir.resolve("nm1"), jobA, 0, 0, 7);
        writeMapOutput(dir.resolve("nm1"), jobB, 0, 0, 8);
        try (ReducerClient clientA = reducer(jobA, secretA); ReducerClient clientB = reducer(jobB, secretB)) {
            RegisterProtocol.Reply ra = register(clientA, service(clientA), 1, new MapAttempt(0, 0));
            assertArrayEquals(a[1], read(clientA, service(clientA), ra.table(), 0, 0, 1));
            // B learns A's table descriptor somehow: its READs of A's regions fail as unknown keys do.
            try (BlockFetcher f = clientB.newFetcher(1)) {
                f.add(new Request(service(clientB), ra.table(), 0, 0, 1, 2));
                assertThrows(FetchFailure.class, f::next);
            }
            // And a REGISTER on B's connection only ever names B's maps.
            RegisterProtocol.Reply rb = register(clientB, service(clientB), 1, new MapAttempt(0, 0));
            assertEquals(RegisterProtocol.OK, rb.status());
            assertFalse(rb.table().equals(ra.table()));
        }
    }

    @Test
    void shouldAnswerMissingForAnAttemptWhoseOutputIsNotOnTheNodeManager() throws Exception {
        byte[] secret = "s".repeat(20).getBytes();
        JobID job = initJob(service, 5, secret);
        writeMapOutput(dir.resolve("nm1"), job, 0, 0, 1);
        try (ReducerClient client = reducer(job, secret)) {
            RegisterProtocol.Reply r = register(client, service(client), 0, new MapAttempt(0, 0), new MapAttempt(1, 0),
                    new MapAttempt(0, 1));
            assertEquals(RegisterProtocol.PUBLISHED, r.maps()[0].state());
            assertEquals(RegisterProtocol.MISSING, r.maps()[1].state(), "map 1 never ran here");
            assertEquals(RegisterProtocol.MISSING, r.maps()[2].state(), "attempt 1 of map 0 never ran here");
        }
    }

    @Test
    void shouldHoldAtMostTheIndexCacheLimitAndAnswerDroppedIndexesFromTheirFilesWhenManyMapsRegister()
            throws Exception {
        service.stop();
        long limit = 2L * REDUCES * ShuffleServer.INDEX_RECORD_BYTES; // two maps' indexes of the three
        nmConf.set(MapReduceRdmaConf.INDEX_CACHE_MAX_BYTES, Long.toString(limit));
        service = new RdmaShuffleHandler();
        service.init(nmConf);
        service.start();
        byte[] secret = "secret-of-a-big-job".getBytes();
        JobID job = initJob(service, 40, secret);
        byte[][][] outputs = new byte[MAPS][][];
        for (int m = 0; m < MAPS; m++) {
            outputs[m] = writeMapOutput(dir.resolve("nm1"), job, m, 0, 400 + m);
        }
        IndexCache indexes = service.server().indexes();
        try (ReducerClient client = reducer(job, secret)) {
            NodeAddress at = service(client);
            for (int round = 0; round < 2; round++) {
                for (int reduce = 0; reduce < REDUCES; reduce++) {
                    for (int m = 0; m < MAPS; m++) { // each map alone: the least recently used one is dropped
                        RegisterProtocol.Reply reply = register(client, at, reduce, new MapAttempt(m, 0));
                        assertEquals(RegisterProtocol.PUBLISHED, reply.maps()[0].state(), reply.reason());
                        assertEquals(outputs[m][reduce].length, reply.maps()[0].partLength());
                        assertEquals(outputs[m][reduce].length * 2L, reply.maps()[0].rawLength());
                        assertTrue(indexes.heldBytes() <= limit, indexes.heldBytes() + " bytes held > " + limit);
                    }
                }
            }
            assertEquals(2, indexes.heldIndexes());
            assertTrue(indexes.indexReads() > MAPS, "dropped indexes were read again: " + indexes.indexReads());
        }
    }

    @Test
    void shouldLookForAMissingOutputOnDiskOnceWhenReducersAskAgainAndAgain() throws Exception {
        byte[] secret = "secret-of-job-41".getBytes();
        JobID job = initJob(service, 41, secret);
        IndexCache indexes = service.server().indexes();
        try (ReducerClient client = reducer(job, secret)) {
            NodeAddress at = service(client);
            long before = indexes.lookups();
            for (int i = 0; i < 5; i++) {
                RegisterProtocol.Reply r = register(client, at, 0, new MapAttempt(1, 0));
                assertEquals(RegisterProtocol.MISSING, r.maps()[0].state());
            }
            assertEquals(1, indexes.lookups() - before, "one disk lookup for five asks within the remembered time");
        }
    }

    @Test
    void shouldServeTheAttemptAReducerNamesAndLeaveAnOlderOnesReadersToHttp() throws Exception {
        byte[] secret = "rerun".repeat(5).getBytes();
        JobID job = initJob(service, 6, secret);
        writeMapOutput(dir.resolve("nm1"), job, 0, 0, 1);
        byte[][] second = writeMapOutput(dir.resolve("nm1"), job, 0, 1, 2);
        try (ReducerClient client = reducer(job, secret)) {
            NodeAddress at = service(client);
            RegisterProtocol.Reply first = register(client, at, 2, new MapAttempt(0, 0));
            RegisterProtocol.Reply rerun = register(client, at, 2, new MapAttempt(0, 1));
            assertArrayEquals(second[2], read(client, at, rerun.table(), 0, 1, 2));
            try (BlockFetcher f = client.newFetcher(1)) {
                f.add(new Request(at, first.table(), 0, 0, 2, 3));
                try (Block b = f.next()) {
                    assertTrue(b.unregistered(), "attempt 0 was replaced in the table: its reader goes to HTTP");
                }
            }
            RegisterProtocol.Reply late = register(client, at, 2, new MapAttempt(0, 0));
            assertEquals(RegisterProtocol.VIA_HTTP, late.maps()[0].state(),
                    "a reducer still naming the older attempt does not knock the later one out of the table");
            assertArrayEquals(second[2], read(client, at, rerun.table(), 0, 1, 2));
        }
    }

    @Test
    void shouldRefuseLyingRegistersAndKeepServing() throws Exception {
        byte[] secret = "liar".repeat(5).getBytes();
        JobID job = initJob(service, 7, secret);
        byte[][] parts = writeMapOutput(dir.resolve("nm1"), job, 0, 0, 1);
        try (ReducerClient client = reducer(job, secret)) {
            NodeAddress at = service(client);
            ByteBuffer cut = RegisterProtocol.encode(new RegisterProtocol.Request(MAPS, REDUCES, 0,
                    new MapAttempt[] {new MapAttempt(0, 0)}));
            cut.limit(cut.limit() - 3);
            assertRefused(client.call(at, cut), "5 bytes for 1 maps");
            ByteBuffer outside = ByteBuffer.allocate(26).put(RegisterProtocol.REGISTER).put(RegisterProtocol.VERSION)
                    .putInt(MAPS).putInt(REDUCES).putInt(0).putInt(1).putInt(MAPS).putInt(0).flip();
            assertRefused(client.call(at, outside), "map index 3 of 3");
            ByteBuffer tooMany = ByteBuffer.allocate(18).put(RegisterProtocol.REGISTER).put(RegisterProtocol.VERSION)
                    .putInt(MAPS).putInt(REDUCES).putInt(0).putInt(Integer.MAX_VALUE).flip();
            assertRefused(client.call(at, tooMany), "count");
            ByteBuffer huge = RegisterProtocol.encode(new RegisterProtocol.Request(RegisterProtocol.MAX_MAPS + 1, REDUCES,
                    0, new MapAttempt[] {new MapAttempt(0, 0)}));
            assertRefused(client.call(at, huge), "numMaps");
            RegisterProtocol.Reply ok = register(client, at, 3, new MapAttempt(0, 0));
            assertArrayEquals(parts[3], read(client, at, ok.table(), 0, 0, 3));
            ByteBuffer otherCount = RegisterProtocol.encode(new RegisterProtocol.Request(MAPS + 5, REDUCES, 0,
                    new MapAttempt[] {new MapAttempt(0, 0)}));
            assertRefused(client.call(at, otherCount), "has 3 maps");
        }
    }

    private static void assertRefused(ByteBuffer reply, String reasonPart) {
        RegisterProtocol.Reply r = RegisterProtocol.parseReply(reply, 1);
        assertEquals(RegisterProtocol.BAD_REQUEST, r.status());
        assertTrue(r.reason().contains(reasonPart), r.reason());
    }

    @Test
    void shouldDeregisterAJobsOutputsWhenItsApplicationStopsAndRefuseItsReducersAfter() throws Exception {
        byte[] secret = "stopping".repeat(3).getBytes();
        JobID job = initJob(service, 8, secret);
        writeMapOutput(dir.resolve("nm1"), job, 1, 0, 3);
        try (ReducerClient client = reducer(job, secret)) {
            register(client, service(client), 0, new MapAttempt(1, 0));
        }
        assertTrue(service.server().outputs().registeredOutputBytes() > 0);
        service.stopApplication(new ApplicationTerminationContext(
                ApplicationId.newInstance(Long.parseLong(job.getJtIdentifier()), job.getId())));
        service.server().awaitDeregistrations();
        assertEquals(0, service.server().outputs().registeredOutputBytes());
        try (ReducerClient client = reducer(job, secret)) {
            assertThrows(IOException.class, () -> register(client, service(client), 0, new MapAttempt(1, 0)));
        }
    }

    @Test
    void shouldStopAJobWithoutDeregisteringItsOutputsOnTheDispatcherAndGiveItsReducersNothingMeanwhile()
            throws Exception {
        byte[] secret = "many-outputs".getBytes();
        JobID job = initJob(service, 15, secret);
        int regionsBefore = service.server().outputs().node().stats().registeredRegions();
        byte[][][] parts = new byte[MAPS][][];
        for (int m = 0; m < MAPS; m++) {
            parts[m] = writeMapOutput(dir.resolve("nm1"), job, m, 0, 20 + m);
        }
        java.util.concurrent.CountDownLatch workerHeld = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.CountDownLatch releaseWorker = new java.util.concurrent.CountDownLatch(1);
        try (ReducerClient client = reducer(job, secret)) {
            RegisterProtocol.Reply r = register(client, service(client), 2, new MapAttempt(0, 0), new MapAttempt(1, 0),
                    new MapAttempt(2, 0));
            assertEquals(RegisterProtocol.OK, r.status());
            assertArrayEquals(parts[1][2], read(client, service(client), r.table(), 1, 0, 2));
            long registered = service.server().outputs().registeredOutputBytes();
            assertTrue(registered > 0);
            service.server().deregistrations().execute(() -> { // the worker is busy with an earlier job's stop
                workerHeld.countDown();
                try {
                    releaseWorker.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            try {
                workerHeld.await();
                service.stopApplication(new ApplicationTerminationContext(
                        ApplicationId.newInstance(Long.parseLong(job.getJtIdentifier()), job.getId())));
                // Returned while the worker cannot have deregistered anything: the outputs are still registered...
                assertEquals(registered, service.server().outputs().registeredOutputBytes(),
                        "stopApplication deregistered the job's outputs itself, on the NodeManager's dispatcher");
                // ...but the job's reducers get nothing: not its table on the connection they hold,
                try (BlockFetcher f = client.newFetcher(1)) {
                    f.add(new Request(service(client), r.table(), 0, 0, 2, 3));
                    assertThrows(FetchFailure.class, f::next);
                }
                // no REGISTER, and no new connection.
                assertRefusedAsStopped(register(client, service(client), 2, new MapAttempt(0, 0)));
                try (ReducerClient late = reducer(job, secret)) {
                    assertThrows(IOException.class, () -> register(late, service(late), 2, new MapAttempt(0, 0)));
                }
            } finally {
                releaseWorker.countDown();
            }
            service.server().awaitDeregistrations();
            assertEquals(0, service.server().outputs().registeredOutputBytes());
            assertEquals(regionsBefore, service.server().outputs().node().stats().registeredRegions(),
                    "every region of the job's outputs and table is deregistered: its rkeys are unknown");
            try (BlockFetcher f = client.newFetcher(1)) {
                f.add(new Request(service(client), r.table(), 1, 0, 2, 3));
                assertThrows(FetchFailure.class, f::next);
            }
        }
    }

    @Test
    void shouldLogAJobStopWhoseDeregistrationFailsOnceAsAWarningAndKeepStoppingJobs() throws Exception {
        try (LoggedWarnings logged = LoggedWarnings.of(ShuffleServer.class)) {
            java.util.List<String> warnings = logged.messages();
            service.server().deregistrations().execute(() -> { // as a table's close() that throws on the worker
                throw new IllegalStateException("deregistering region 7 failed");
            });
            service.server().awaitDeregistrations();
            assertEquals(1, warnings.size(), "one WARN through SLF4J (not the thread's stderr): " + warnings);
            assertTrue(warnings.get(0).contains("deregistering region 7 failed"), warnings.get(0));
            // and the next job's stop still runs
            byte[] secret = "after-a-failed-stop".getBytes();
            JobID job = initJob(service, 16, secret);
            writeMapOutput(dir.resolve("nm1"), job, 0, 0, 30);
            try (ReducerClient client = reducer(job, secret)) {
                register(client, service(client), 0, new MapAttempt(0, 0));
            }
            service.stopApplication(new ApplicationTerminationContext(
                    ApplicationId.newInstance(Long.parseLong(job.getJtIdentifier()), job.getId())));
            service.server().awaitDeregistrations();
            assertEquals(0, service.server().outputs().registeredOutputBytes());
            assertEquals(1, warnings.size(), String.valueOf(warnings));
        }
    }

    private static void assertRefusedAsStopped(RegisterProtocol.Reply reply) {
        assertEquals(RegisterProtocol.UNKNOWN_JOB, reply.status(), reply.reason());
    }

    @Test
    void shouldShareThePortsNodeBetweenTwoNodeManagersOfOneProcessAndServeEachOnesOutputs() throws Exception {
        Path nm2Dir = dir.resolve("nm2");
        RdmaShuffleHandler nm2 = new RdmaShuffleHandler();
        nm2.init(nodeManagerConf(nm2Dir));
        nm2.start();
        try {
            assertNotNull(nm2.server());
            assertTrue(nm2.server() == service.server(), "one node per port in a process");
            byte[] secret = "shared".repeat(4).getBytes();
            JobID job = initJob(service, 9, secret);
            initJob(nm2, 9, secret);
            byte[][] onFirst = writeMapOutput(dir.resolve("nm1"), job, 0, 0, 5);
            byte[][] onSecond = writeMapOutput(nm2Dir, job, 1, 0, 6);
            try (ReducerClient client = reducer(job, secret)) {
                NodeAddress at = service(client);
                RegisterProtocol.Reply r = register(client, at, 1, new MapAttempt(0, 0), new MapAttempt(1, 0));
                assertArrayEquals(onFirst[1], read(client, at, r.table(), 0, 0, 1));
                assertArrayEquals(onSecond[1], read(client, at, r.table(), 1, 0, 1));
            }
        } finally {
            nm2.stop();
        }
        File stillServing = new File(dir.toFile(), "nm1");
        assertTrue(stillServing.isDirectory());
        assertNotNull(service.server(), "the first NodeManager's service still runs");
        assertTrue(service.server().address().port() == port);
    }

    @Test
    void shouldDropAJobsTableWhenItStopsOnEveryNodeManagerAfterOneRestartedItsServiceWhileTheOtherKeptTheNode()
            throws Exception {
        RdmaShuffleHandler nm2 = new RdmaShuffleHandler();
        nm2.init(nodeManagerConf(dir.resolve("nm2")));
        nm2.start();
        try {
            byte[] secret = "restarted".repeat(3).getBytes();
            JobID job = initJob(service, 12, secret);
            initJob(nm2, 12, secret);
            try (ReducerClient client = reducer(job, secret)) {
                RegisterProtocol.Reply r = register(client, service(client), 0, new MapAttempt(0, 0));
                assertEquals(RegisterProtocol.OK, r.status(), r.reason());
            }
            ShuffleServer shared = nm2.server();
            assertTrue(shared.outputs().tableBytes() > 0, "the job's table is held");
            service.stop(); // the first NodeManager's service restarts; the second keeps the port's node
            service = ServiceFixture.started(nmConf);
            assertTrue(service.server() == shared, "the node stayed up");
            initJob(service, 12, secret); // the job's next container on the first NodeManager
            ApplicationId app = ServiceFixture.appOf(job);
            service.stopApplication(new ApplicationTerminationContext(app));
            nm2.stopApplication(new ApplicationTerminationContext(app));
            shared.awaitDeregistrations();
            assertNull(shared.jobs().job(job.toString()), "the job stopped on every NodeManager is forgotten");
            assertNull(shared.jobs().secretOf(job.toString()));
            assertEquals(0, shared.outputs().tableBytes(), "the job's table bytes are given back");
        } finally {
            nm2.stop();
        }
    }

    @Test
    void shouldRefuseAPortOfZeroOrRetriesAtStartSayingWhy() {
        Configuration c = new Configuration(false);
        c.set(MapReduceRdmaConf.PORT, "0");
        RdmaShuffleHandler h = new RdmaShuffleHandler();
        Exception e = assertThrows(Exception.class, () -> h.init(c));
        assertTrue(String.valueOf(e.getMessage()).contains(MapReduceRdmaConf.PORT)
                || String.valueOf(e.getCause()).contains(MapReduceRdmaConf.PORT), String.valueOf(e));
        Configuration r = new Configuration(false);
        r.set(MapReduceRdmaConf.PREFIX + "port.maxRetries", "3");
        assertThrows(Exception.class, () -> MapReduceRdmaConf.from(r));
        Configuration unknown = new Configuration(false);
        unknown.set(MapReduceRdmaConf.PREFIX + "noSuchKey", "1");
        assertThrows(RuntimeException.class, () -> MapReduceRdmaConf.from(unknown));
        assertEquals(RdmaShuffleConf.Provider.TCP, MapReduceRdmaConf.from(withProvider()).provider());
    }

    @Test
    void shouldServeOnlyPlainFilesAndIndexesOfTheJobsReduceCount() throws Exception {
        byte[] secret = "plain-files".getBytes();
        JobID job = initJob(service, 11, secret);
        byte[][] parts = writeMapOutput(dir.resolve("nm1"), job, 0, 0, 11);
        // map 1: its file.out a link to a file the service may read but no reducer may
        writeMapOutput(dir.resolve("nm1"), job, 1, 0, 12);
        Path linked = outputDir(dir.resolve("nm1"), job, 1, 0).resolve("file.out");
        Path secretFile = Files.writeString(dir.resolve("nodemanager-only"), "the NodeManager's keytab");
        Files.delete(linked);
        Files.createSymbolicLink(linked, secretFile);
        // map 2: an index of another reduce count (a lying or foreign index is not read)
        writeMapOutput(dir.resolve("nm1"), job, 2, 0, 13);
        Path index = outputDir(dir.resolve("nm1"), job, 2, 0).resolve("file.out.index");
        Files.write(index, new byte[1 << 20]);
        try (ReducerClient client = reducer(job, secret)) {
            RegisterProtocol.Reply r = register(client, service(client), 1, new MapAttempt(0, 0), new MapAttempt(1, 0),
                    new MapAttempt(2, 0));
            assertEquals(RegisterProtocol.PUBLISHED, r.maps()[0].state());
            assertEquals(RegisterProtocol.MISSING, r.maps()[1].state(), "a linked output is not served");
            assertEquals(RegisterProtocol.VIA_HTTP, r.maps()[2].state(), "an index of another size is not read");
            assertArrayEquals(parts[1], read(client, service(client), r.table(), 0, 0, 1));
        }
    }

    @Test
    @org.junit.jupiter.api.Timeout(60) // without the check, the REGISTER would block the node on the pipe for good
    void shouldNotBlockOnAPipeNamedAsAnIndex() throws Exception {
        byte[] secret = "fifo".repeat(4).getBytes();
        JobID job = initJob(service, 12, secret);
        writeMapOutput(dir.resolve("nm1"), job, 0, 0, 14);
        Path index = outputDir(dir.resolve("nm1"), job, 0, 0).resolve("file.out.index");
        Files.delete(index);
        int made;
        try {
            made = new ProcessBuilder("mkfifo", index.toString()).start().waitFor();
        } catch (IOException e) {
            made = -1;
        }
        org.junit.jupiter.api.Assumptions.assumeTrue(made == 0, "mkfifo is not available here to make a pipe");
        try (ReducerClient client = reducer(job, secret)) {
            RegisterProtocol.Reply r = register(client, service(client), 0, new MapAttempt(0, 0));
            assertEquals(RegisterProtocol.MISSING, r.maps()[0].state(), "a pipe is not opened");
        }
    }

    @Test
    void shouldStopAnApplicationWithoutWaitingForARegisterThatHoldsItsJob() throws Exception {
        byte[] secret = "busy-job".getBytes();
        JobID job = initJob(service, 14, secret);
        ServedJobs.Job served = service.server().jobs().job(job.toString());
        java.util.concurrent.CountDownLatch held = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
        Thread register = new Thread(() -> {
            synchronized (served) { // as a REGISTER reading a slow disk holds it
                held.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        });
        register.start();
        try {
            held.await();
            Thread stop = new Thread(() -> service.stopApplication(new ApplicationTerminationContext(
                    ApplicationId.newInstance(Long.parseLong(job.getJtIdentifier()), job.getId()))));
            stop.start();
            stop.join(5000);
            assertFalse(stop.isAlive(), "stopApplication (the NodeManager's dispatcher) waited for the job's lock");
        } finally {
            release.countDown();
            register.join();
        }
        assertEquals(null, service.server().jobs().job(job.toString()));
    }

    /** Waits until a thread is blocked in {@link ShuffleServer#register} (on its job's lock): a REGISTER under way. */
    private static void awaitRegisterBlocked() throws InterruptedException {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (System.nanoTime() < deadline) {
            for (var e : Thread.getAllStackTraces().entrySet()) {
                if (e.getKey().getState() == Thread.State.BLOCKED && java.util.Arrays.stream(e.getValue()).anyMatch(
                        f -> f.getClassName().equals(ShuffleServer.class.getName())
                                && f.getMethodName().equals("register"))) {
                    return;
                }
            }
            Thread.sleep(20);
        }
        throw new AssertionError("no REGISTER reached its job's lock within 30 s");
    }

    @Test
    @org.junit.jupiter.api.Timeout(180)
    void shouldServeAnotherJobsReadWhileARegisterWaitsOnItsJobsSlowDisk() throws Exception {
        byte[] slowSecret = "slow-disk-job".getBytes();
        byte[] otherSecret = "other-job".getBytes();
        Path nm1 = dir.resolve("nm1");
        JobID slow = initJob(service, 15, slowSecret);
        JobID other = initJob(service, 16, otherSecret);
        writeMapOutput(nm1, slow, 0, 0, 16);
        byte[][] parts = writeMapOutput(nm1, other, 0, 0, 17);
        try (ReducerClient slowReducer = reducer(slow, slowSecret);
             ReducerClient otherReducer = reducer(other, otherSecret)) {
            RegisterProtocol.Reply registered = register(otherReducer, service(otherReducer), 2, new MapAttempt(0, 0));
            assertEquals(RegisterProtocol.OK, registered.status());
            ServedJobs.Job held = service.server().jobs().job(slow.toString());
            java.util.concurrent.CountDownLatch holding = new java.util.concurrent.CountDownLatch(1);
            java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
            Thread disk = new Thread(() -> {
                synchronized (held) { // as a REGISTER of the job reading a slow disk holds it
                    holding.countDown();
                    try {
                        release.await();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
            });
            disk.start();
            java.util.concurrent.CompletableFuture<RegisterProtocol.Reply> waiting;
            try {
                holding.await();
                waiting = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
                    try {
                        return register(slowReducer, service(slowReducer), 1, new MapAttempt(0, 0));
                    } catch (Exception e) {
                        throw new java.util.concurrent.CompletionException(e);
                    }
                });
                awaitRegisterBlocked();
                java.util.concurrent.CompletableFuture<byte[]> read = java.util.concurrent.CompletableFuture.supplyAsync(
                        () -> {
                            try {
                                return read(otherReducer, service(otherReducer), registered.table(), 0, 0, 2);
                            } catch (Exception e) {
                                throw new java.util.concurrent.CompletionException(e);
                            }
                        });
                byte[] got;
                try {
                    got = read.get(60, java.util.concurrent.TimeUnit.SECONDS);
                } catch (java.util.concurrent.TimeoutException e) {
                    throw new AssertionError("another job's READ waited for a REGISTER held on its job's disk", e);
                }
                assertArrayEquals(parts[2], got);
                assertFalse(waiting.isDone(), "the held REGISTER was answered before its job's disk let it go");
            } finally {
                release.countDown();
                disk.join();
            }
            RegisterProtocol.Reply late = waiting.get(60, java.util.concurrent.TimeUnit.SECONDS);
            assertEquals(RegisterProtocol.OK, late.status());
            assertEquals(RegisterProtocol.PUBLISHED, late.maps()[0].state());
        }
    }

    @Test
    @org.junit.jupiter.api.Timeout(120)
    void shouldAnswerBusyWhenEveryRegisterWorkerIsTakenAndSendOnlyThatBatchOverHttpThisTurn() throws Exception {
        byte[] secret = "busy-workers".getBytes();
        JobID job = initJob(service, 17, secret);
        writeMapOutput(dir.resolve("nm1"), job, 0, 0, 18);
        java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.Executor workers = service.server().registerWorkers();
        int taken = 0;
        try {
            try {
                for (; taken < 10_000; taken++) {
                    while (taken == ShuffleServer.REGISTER_THREADS && service.server().registersWaiting() > 0) {
                        Thread.sleep(5); // every worker has taken its task: the rest wait
                    }
                    workers.execute(() -> {
                        try {
                            release.await();
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                    });
                }
            } catch (java.util.concurrent.RejectedExecutionException full) {
                // every worker runs one and the queue is full
            }
            assertEquals(ShuffleServer.REGISTER_THREADS + ShuffleServer.REGISTER_QUEUE, taken);
            try (ReducerClient first = reducer(job, secret); ReducerClient client = reducer(job, secret)) {
                NodeAddress at = service(client);
                // The job's first REGISTER waits (a job with none waiting is admitted); its next one is busy.
                java.util.concurrent.CompletableFuture<RegisterProtocol.Reply> admitted =
                        java.util.concurrent.CompletableFuture.supplyAsync(() -> {
                            try {
                                return register(first, at, 1, new MapAttempt(0, 0));
                            } catch (Exception e) {
                                throw new java.util.concurrent.CompletionException(e);
                            }
                        }, r -> new Thread(r).start());
                while (service.server().registersWaiting() <= ShuffleServer.REGISTER_QUEUE && !admitted.isDone()) {
                    Thread.sleep(5);
                }
                RegisterProtocol.Reply busy = register(client, at, 0, new MapAttempt(0, 0));
                assertEquals(RegisterProtocol.BUSY, busy.status(), busy.reason());
                assertEquals(1, service.server().busyReplies());

                // The reducer: this batch goes over HTTP this turn, the rest is asked for, the host is not HTTP's for good.
                RdmaFetcher<Object, Object> fetcher = new RdmaFetcher<>(null, 0, client, null);
                org.apache.hadoop.mapreduce.task.reduce.MapHost host = new org.apache.hadoop.mapreduce.task.reduce.MapHost(
                        "127.0.0.1:13562", "http://127.0.0.1:13562/mapOutput?job=" + job + "&reduce=0&map=");
                java.util.List<TaskAttemptID> batch = java.util.List.of(
                        new TaskAttemptID(new TaskID(job, TaskType.MAP, 0), 0));
                TaskAttemptID next = new TaskAttemptID(new TaskID(job, TaskType.MAP, 1), 0);
                java.util.Deque<TaskAttemptID> left = new java.util.ArrayDeque<>(java.util.List.of(next));
                java.util.List<TaskAttemptID> viaHttp = new java.util.ArrayList<>();
                assertTrue(fetcher.refused(host, at, busy, batch, left, viaHttp));
                assertEquals(batch, viaHttp);
                assertEquals(java.util.List.of(next), new java.util.ArrayList<>(left));
                assertEquals(null, client.httpReason(host), "a busy service sent the host to HTTP for good");

                release.countDown(); // the workers are free again: the next turn's REGISTER is answered
                assertEquals(RegisterProtocol.OK, admitted.get(60, java.util.concurrent.TimeUnit.SECONDS).status());
                assertEquals(RegisterProtocol.OK, register(client, at, 0, new MapAttempt(0, 0)).status());

                // A job the service does not know (yet: a restarted service): this batch and the rest over HTTP,
                // the host's READs tried again after a wait.
                RegisterProtocol.Reply unknown = RegisterProtocol.parseReply(RegisterProtocol.encodeRefusal(
                        RegisterProtocol.UNKNOWN_JOB, "not here"), 1);
                java.util.List<TaskAttemptID> allViaHttp = new java.util.ArrayList<>();
                assertFalse(fetcher.refused(host, at, unknown, batch, left, allViaHttp));
                assertEquals(java.util.List.of(batch.get(0), next), allViaHttp);
                assertEquals(null, client.httpReason(host), "an unknown job sent the host to HTTP for good");
                assertNotNull(client.busyReason(host));

                // A request the service calls bad sends the host to HTTP for good.
                RegisterProtocol.Reply bad = RegisterProtocol.parseReply(RegisterProtocol.encodeRefusal(
                        RegisterProtocol.BAD_REQUEST, "not so"), 1);
                left.add(next);
                java.util.List<TaskAttemptID> rest = new java.util.ArrayList<>();
                assertFalse(fetcher.refused(host, at, bad, batch, left, rest));
                assertEquals(java.util.List.of(batch.get(0), next), rest);
                assertNotNull(client.httpReason(host));

                // No room for the job's output table on another host: that host's maps of this job over HTTP, with
                // its own reason (not a service that is down: no wait, nothing counted as unreachable).
                org.apache.hadoop.mapreduce.task.reduce.MapHost full = new org.apache.hadoop.mapreduce.task.reduce.MapHost(
                        "127.0.0.2:13562", "http://127.0.0.2:13562/mapOutput?job=" + job + "&reduce=0&map=");
                RegisterProtocol.Reply noRoom = RegisterProtocol.parseReply(RegisterProtocol.encodeRefusal(
                        RegisterProtocol.NO_ROOM, "its output table cannot be registered here"), 1);
                left.add(next);
                java.util.List<TaskAttemptID> fullViaHttp = new java.util.ArrayList<>();
                assertFalse(fetcher.refused(full, at, noRoom, batch, left, fullViaHttp));
                assertEquals(java.util.List.of(batch.get(0), next), fullViaHttp);
                assertTrue(client.httpReason(full).contains("no room for this job"), client.httpReason(full));
                assertEquals(null, client.busyReason(full), "a service with no room was taken as down");
            }
        } finally {
            release.countDown();
        }
    }

    private static Path outputDir(Path localDir, JobID job, int map, int attempt) {
        ApplicationId app = ApplicationId.newInstance(Long.parseLong(job.getJtIdentifier()), job.getId());
        TaskAttemptID id = new TaskAttemptID(new TaskID(job, TaskType.MAP, map), attempt);
        return localDir.resolve(LocalDirs.appBase(USER, app.toString())).resolve("output").resolve(id.toString());
    }

    private static Configuration withProvider() {
        Configuration c = new Configuration(false);
        c.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
        return c;
    }
}
