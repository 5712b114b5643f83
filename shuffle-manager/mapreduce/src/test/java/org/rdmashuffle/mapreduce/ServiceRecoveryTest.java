package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.server.api.ApplicationTerminationContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.transport.NodeAddress;

/**
 * With NodeManager recovery on (YARN gives the service a recovery path), a restarted service knows the jobs that
 * ran before at once — their reducers REGISTER and READ without a new container of the job on the NodeManager —
 * and forgets a job when its application stops; an entry it cannot read is skipped, the start goes on.
 */
class ServiceRecoveryTest {
    private static final String USER = "alice";
    private static final int REDUCES = 3;

    @TempDir
    Path dir;

    private RdmaShuffleHandler started(Configuration conf, Path recovery) {
        RdmaShuffleHandler service = new RdmaShuffleHandler();
        service.setRecoveryPath(new org.apache.hadoop.fs.Path(recovery.toString())); // as YARN gives it
        service.init(conf);
        service.start();
        return service;
    }

    private static byte[] readPartition(Configuration conf, RdmaShuffleHandler service, JobID job, byte[] secret,
                                        int reduce) throws Exception {
        try (ReducerClient client = new ReducerClient(MapReduceRdmaConf.from(conf), job.toString(), secret)) {
            NodeAddress at = service.server().address();
            RegisterProtocol.Reply reply = RegisterProtocol.parseReply(client.call(at, RegisterProtocol.encode(
                    new RegisterProtocol.Request(1, REDUCES, reduce, new MapAttempt[] {new MapAttempt(0, 0)}))), 1);
            assertEquals(RegisterProtocol.OK, reply.status(), reply.reason());
            try (BlockFetcher f = client.newFetcher(1)) {
                f.add(new BlockFetcher.Request(at, reply.table(), 0, 0, reduce, reduce + 1));
                try (BlockFetcher.Block b = f.next()) {
                    assertFalse(b.unregistered(), () -> "left to HTTP: " + b.viaEngineReason());
                    byte[] bytes = new byte[(int) b.length()];
                    b.bytes().get(bytes);
                    return bytes;
                }
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldServeARunningJobAtOnceWhenRestartedWithTheRecoveryPathAndForgetItWhenItStops() throws Exception {
        Path local = dir.resolve("nm");
        Path recovery = dir.resolve("recovery");
        Files.createDirectories(local);
        Files.createDirectories(recovery);
        Configuration conf = ServiceFixture.nodeManagerConf(local, ServiceFixture.freePort());
        byte[] secret = "job-secret-of-app-5".getBytes(StandardCharsets.UTF_8);
        JobID job;
        RdmaShuffleHandler first = started(conf, recovery);
        try {
            job = ServiceFixture.initJob(first, USER, 5, secret);
        } finally {
            first.stop(); // the NodeManager (or its service) restarts
        }
        Path kept = recovery.resolve(JobSecretStore.DIR_NAME);
        Path entry = kept.resolve(ServiceFixture.appOf(job).toString());
        assertTrue(Files.isRegularFile(entry), "the job is kept in " + kept);
        assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(kept)));
        assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(entry)));
        // Beside it: an entry that is no job (a corrupt file, a name no application has): WARNed and skipped.
        ApplicationId other = ServiceFixture.app(6);
        Files.writeString(kept.resolve(other.toString()), "garbage\n");
        Files.writeString(kept.resolve("not-an-application"), "rdma-shuffle job secret v1\nbob\nAAAA\n");
        byte[][] parts = ServiceFixture.writeMapOutput(local, USER, job, 0, 0, REDUCES, 55);

        RdmaShuffleHandler second = started(conf, recovery);
        try {
            assertTrue(second.server().jobs().hasSecret(job.toString()), "the job is known without a container");
            assertFalse(second.server().jobs().hasSecret(ServiceFixture.jobOf(other).toString()));
            assertArrayEquals(parts[1], readPartition(conf, second, job, secret, 1), "READ after the restart");
            assertThrows(IOException.class, () -> readPartition(conf, second, job, "wrong".getBytes(), 1),
                    "the kept secret is the job's, no other");

            second.stopApplication(new ApplicationTerminationContext(ServiceFixture.appOf(job)));
            second.server().awaitDeregistrations();
            assertFalse(Files.exists(entry), "the stopped job's entry is gone");
        } finally {
            second.stop();
        }
        RdmaShuffleHandler third = started(conf, recovery);
        try {
            assertFalse(third.server().jobs().hasSecret(job.toString()), "a stopped job is not known again");
        } finally {
            third.stop();
        }
    }

    @Test
    @Timeout(60)
    void shouldServeAJobWithTheTokenYarnHandsRatherThanTheSecretKeptBeforeTheRestartWhenBothAreKnown()
            throws Exception {
        Path local = dir.resolve("nm");
        Path recovery = dir.resolve("recovery");
        Files.createDirectories(local);
        Files.createDirectories(recovery);
        Configuration conf = ServiceFixture.nodeManagerConf(local, ServiceFixture.freePort());
        byte[] stale = "kept-before-the-restart".getBytes(StandardCharsets.UTF_8);
        byte[] fresh = "handed-by-yarn-after-it".getBytes(StandardCharsets.UTF_8);
        RdmaShuffleHandler first = started(conf, recovery);
        JobID job;
        try {
            job = ServiceFixture.initJob(first, USER, 8, stale);
        } finally {
            first.stop();
        }
        RdmaShuffleHandler second = started(conf, recovery);
        try (LoggedWarnings warnings = LoggedWarnings.of(ServedJobs.class)) {
            ServedJobs jobs = second.server().jobs();
            assertArrayEquals(stale, jobs.secretOf(job.toString()), "known from the store at the start");
            ServiceFixture.initJob(second, USER, 8, fresh); // the job's next container here
            assertArrayEquals(fresh, jobs.secretOf(job.toString()), "the token YARN hands replaces the kept secret");
            assertTrue(warnings.messages().isEmpty(), warnings.messages().toString());
            assertArrayEquals(fresh, JobSecretStore.under(recovery).load().get(0).secret(), "and is kept");

            ServiceFixture.initJob(second, USER, 8, "a-third-token".getBytes(StandardCharsets.UTF_8));
            assertArrayEquals(fresh, jobs.secretOf(job.toString()), "a token's secret is not replaced by another");
            assertEquals(1, warnings.messages().size(), warnings.messages().toString());
            assertArrayEquals(fresh, JobSecretStore.under(recovery).load().get(0).secret());
        } finally {
            second.stop();
        }
    }

    @Test
    @Timeout(60)
    void shouldKeepNothingWhenNoRecoveryPathIsGiven() throws Exception {
        Path local = dir.resolve("nm");
        Files.createDirectories(local);
        Configuration conf = ServiceFixture.nodeManagerConf(local, ServiceFixture.freePort());
        RdmaShuffleHandler service = ServiceFixture.started(conf);
        try {
            JobID job = ServiceFixture.initJob(service, USER, 7, "s".getBytes(StandardCharsets.UTF_8));
            assertTrue(service.server().jobs().hasSecret(job.toString()));
        } finally {
            service.stop();
        }
        try (var files = Files.walk(dir)) {
            assertTrue(files.noneMatch(p -> p.getFileName().toString().equals(JobSecretStore.DIR_NAME)));
        }
    }
}
