package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.server.api.ApplicationTerminationContext;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.transport.NodeAddress;

/**
 * REGISTERs on a NodeManager's service whose disk is slow for one job: the others' are answered, the slow job's
 * past its share are answered busy; and a REGISTER that was reading an index as its application stopped.
 */
@Timeout(120)
class RegisterFairnessTest {
    private static final String USER = "alice";
    @TempDir
    Path dir;
    private Configuration conf;
    private RdmaShuffleHandler service;
    private int port;
    private final List<ReducerClient> clients = new ArrayList<>();
    /** A thread per REGISTER under way (each blocks on its reply; the common pool may have one thread). */
    private final java.util.concurrent.ExecutorService callers = java.util.concurrent.Executors.newCachedThreadPool();

    @BeforeEach
    void start() throws Exception {
        port = ServiceFixture.freePort();
        Files.createDirectories(dir.resolve("nm1"));
        conf = ServiceFixture.nodeManagerConf(dir.resolve("nm1"), port);
        service = ServiceFixture.started(conf);
    }

    @AfterEach
    void stop() throws Exception {
        for (int i = clients.size() - 1; i >= 0; i--) {
            clients.get(i).close();
        }
        service.stop();
        callers.shutdownNow();
    }

    private ReducerClient client(JobID job, byte[] secret) throws Exception {
        ReducerClient c = new ReducerClient(MapReduceRdmaConf.from(conf), job.toString(), secret);
        clients.add(c);
        return c;
    }

    /** Reduce {@code reduce} of a job of 2 maps and 4 reduces asks for map {@code map}'s attempt 0. */
    private CompletableFuture<RegisterProtocol.Reply> registerAsync(ReducerClient c, int reduce, int map) {
        return CompletableFuture.supplyAsync(() -> {
            try {
                ByteBuffer r = c.call(new NodeAddress("127.0.0.1", port, service.server().address().provider()),
                        RegisterProtocol.encode(new RegisterProtocol.Request(2, 4, reduce,
                                new MapAttempt[] {new MapAttempt(map, 0)})));
                return RegisterProtocol.parseReply(r, 1);
            } catch (Exception e) {
                throw new CompletionException(e);
            }
        }, callers);
    }

    /** Holds the register worker that reaches {@code step} for a file under {@code appDir} until released. */
    private static final class HeldDisk {
        final CountDownLatch entered = new CountDownLatch(1);
        final CountDownLatch release = new CountDownLatch(1);

        void hold(File index, String appDir) {
            if (index.getPath().contains(appDir)) {
                entered.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
    }

    private static String appDir(int number) {
        return ServiceFixture.app(number).toString();
    }

    @Test
    void shouldAnswerOtherJobsAndRefuseTheSlowJobsRegistersPastItsShareWhenOneJobsDiskIsHeld() throws Exception {
        byte[] slowSecret = "slow".getBytes();
        byte[] otherSecret = "other".getBytes();
        JobID slow = ServiceFixture.initJob(service, USER, 1, slowSecret);
        JobID other = ServiceFixture.initJob(service, USER, 2, otherSecret);
        ServiceFixture.writeMapOutput(dir.resolve("nm1"), USER, slow, 0, 0, 4, 1);
        ServiceFixture.writeMapOutput(dir.resolve("nm1"), USER, slow, 1, 0, 4, 2);
        ServiceFixture.writeMapOutput(dir.resolve("nm1"), USER, other, 0, 0, 4, 3);
        HeldDisk disk = new HeldDisk();
        service.server().fileSteps(new ShuffleServer.FileSteps() {
            @Override
            public void located(File index, File data) {
                disk.hold(index, appDir(1)); // the slow job's disk
            }
        });
        List<CompletableFuture<RegisterProtocol.Reply>> slowReplies = new ArrayList<>();
        try {
            slowReplies.add(registerAsync(client(slow, slowSecret), 0, 0));
            assertTrue(disk.entered.await(60, TimeUnit.SECONDS), "the slow job's REGISTER never reached its disk");
            // The slow job's share of waiting REGISTERs, behind the one on its disk.
            for (int i = 0; i < ShuffleServer.REGISTER_QUEUE_PER_JOB; i++) {
                slowReplies.add(registerAsync(client(slow, slowSecret), i % 4, 1));
            }
            while (service.server().registersWaiting() < ShuffleServer.REGISTER_QUEUE_PER_JOB) {
                Thread.sleep(20); // they arrive over their connections
            }
            RegisterProtocol.Reply pastShare = registerAsync(client(slow, slowSecret), 1, 1).get(60, TimeUnit.SECONDS);
            assertEquals(RegisterProtocol.BUSY, pastShare.status(), pastShare.reason());
            assertTrue(pastShare.reason().contains("of this job"), pastShare.reason());

            RegisterProtocol.Reply reply;
            try {
                reply = registerAsync(client(other, otherSecret), 0, 0).get(30, TimeUnit.SECONDS);
            } catch (TimeoutException e) {
                throw new AssertionError("another job's REGISTER (its own disk healthy) waited behind the slow job's", e);
            }
            assertEquals(RegisterProtocol.OK, reply.status(), reply.reason());
            assertEquals(RegisterProtocol.PUBLISHED, reply.maps()[0].state());
            for (CompletableFuture<RegisterProtocol.Reply> f : slowReplies) {
                assertTrue(!f.isDone(), "a REGISTER of the slow job was answered while its disk was held");
            }
        } finally {
            disk.release.countDown();
        }
        for (CompletableFuture<RegisterProtocol.Reply> f : slowReplies) {
            RegisterProtocol.Reply r = f.get(60, TimeUnit.SECONDS);
            assertEquals(RegisterProtocol.OK, r.status(), r.reason());
            assertEquals(RegisterProtocol.PUBLISHED, r.maps()[0].state());
        }
    }

    @Test
    void shouldAdmitAnotherJobsRegisterWhenFourJobsWithSlowDisksHoldEveryWaitingPlace() throws Exception {
        int jobs = ShuffleServer.REGISTER_QUEUE / ShuffleServer.REGISTER_QUEUE_PER_JOB; // 4 fill the queue
        JobID[] ids = new JobID[jobs + 1];
        byte[][] secrets = new byte[jobs + 1][];
        for (int j = 0; j <= jobs; j++) {
            secrets[j] = ("job" + j).getBytes();
            ids[j] = ServiceFixture.initJob(service, USER, 10 + j, secrets[j]);
            ServiceFixture.writeMapOutput(dir.resolve("nm1"), USER, ids[j], 0, 0, 4, j);
            ServiceFixture.writeMapOutput(dir.resolve("nm1"), USER, ids[j], 1, 0, 4, 10 + j);
        }
        CountDownLatch entered = new CountDownLatch(ShuffleServer.REGISTER_THREADS);
        CountDownLatch release = new CountDownLatch(1);
        service.server().fileSteps(new ShuffleServer.FileSteps() {
            @Override
            public void located(File index, File data) {
                for (int j = 0; j < jobs; j++) {
                    if (index.getPath().contains(appDir(10 + j))) { // the first four jobs' disks are slow
                        entered.countDown();
                        try {
                            release.await();
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                        return;
                    }
                }
            }
        });
        List<CompletableFuture<RegisterProtocol.Reply>> held = new ArrayList<>();
        CompletableFuture<RegisterProtocol.Reply> fifth;
        try {
            for (int j = 0; j < ShuffleServer.REGISTER_THREADS; j++) { // every worker held on a slow disk
                held.add(registerAsync(client(ids[j], secrets[j]), 0, 0));
            }
            assertTrue(entered.await(60, TimeUnit.SECONDS), "the slow jobs' REGISTERs never reached their disks");
            for (int j = 0; j < jobs; j++) { // each slow job at its share of waiting REGISTERs
                for (int i = 0; i < ShuffleServer.REGISTER_QUEUE_PER_JOB; i++) {
                    held.add(registerAsync(client(ids[j], secrets[j]), i % 4, 1));
                }
            }
            while (service.server().registersWaiting() < ShuffleServer.REGISTER_QUEUE) {
                Thread.sleep(20); // they arrive over their connections
            }
            fifth = registerAsync(client(ids[jobs], secrets[jobs]), 0, 0);
            while (!fifth.isDone() && service.server().registersWaiting() <= ShuffleServer.REGISTER_QUEUE) {
                Thread.sleep(20);
            }
            if (fifth.isDone()) {
                throw new AssertionError("a fifth job's first REGISTER was not admitted: " + fifth.get());
            }
            // Its second, with one of its own waiting and the queue full, is answered busy.
            RegisterProtocol.Reply second = registerAsync(client(ids[jobs], secrets[jobs]), 1, 1)
                    .get(60, TimeUnit.SECONDS);
            assertEquals(RegisterProtocol.BUSY, second.status(), second.reason());
            assertTrue(second.reason().contains(ShuffleServer.REGISTER_QUEUE + " REGISTERs are waiting"),
                    second.reason());
        } finally {
            release.countDown();
        }
        RegisterProtocol.Reply r = fifth.get(60, TimeUnit.SECONDS);
        assertEquals(RegisterProtocol.OK, r.status(), r.reason());
        assertEquals(RegisterProtocol.PUBLISHED, r.maps()[0].state());
        for (CompletableFuture<RegisterProtocol.Reply> f : held) {
            assertEquals(RegisterProtocol.OK, f.get(60, TimeUnit.SECONDS).status());
        }
    }

    @Test
    void shouldAnswerUnknownJobAndCacheNothingWhenTheApplicationStopsWhileARegisterReadsItsIndex() throws Exception {
        byte[] secret = "stopping".getBytes();
        JobID job = ServiceFixture.initJob(service, USER, 3, secret);
        ServiceFixture.writeMapOutput(dir.resolve("nm1"), USER, job, 0, 0, 4, 4);
        HeldDisk disk = new HeldDisk();
        service.server().fileSteps(new ShuffleServer.FileSteps() {
            @Override
            public void indexRead(File index, File data) {
                disk.hold(index, appDir(3));
            }
        });
        CompletableFuture<RegisterProtocol.Reply> reply = registerAsync(client(job, secret), 0, 0);
        try {
            assertTrue(disk.entered.await(60, TimeUnit.SECONDS), "the REGISTER never read its index");
            service.stopApplication(new ApplicationTerminationContext(ApplicationId.newInstance(
                    ServiceFixture.CLUSTER_TIMESTAMP, 3)));
        } finally {
            disk.release.countDown();
        }
        RegisterProtocol.Reply r = reply.get(60, TimeUnit.SECONDS);
        assertEquals(RegisterProtocol.UNKNOWN_JOB, r.status(), "a REGISTER of a stopped job was answered " + r);
        assertEquals(0, service.server().indexes().heldIndexes(), "the stopped job's index stayed in the cache");
        assertEquals(0, service.server().indexes().heldBytes());
        service.server().awaitDeregistrations();
        assertEquals(0, service.server().outputs().registeredOutputBytes());
    }
}
