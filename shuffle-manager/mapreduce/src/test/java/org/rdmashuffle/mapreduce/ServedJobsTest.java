package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.security.TokenCache;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Where and when the service reads a job's credentials: never on a connection's thread. */
class ServedJobsTest {
    private static final String USER = "bob";

    @TempDir
    Path dir;

    private LocalDirs dirs() {
        Configuration c = new Configuration(false);
        c.set(MapReduceRdmaConf.NM_LOCAL_DIRS, dir.toString());
        return new LocalDirs(null, c);
    }

    private Path containerDir(ApplicationId app) {
        ContainerId container = ContainerId.newContainerId(ApplicationAttemptId.newInstance(app, 1), 1);
        return dir.resolve(LocalDirs.appBase(USER, app.toString())).resolve(container.toString());
    }

    private static void writeTokens(Path containerDir, byte[] secret) throws IOException {
        Files.createDirectories(containerDir);
        Credentials creds = new Credentials();
        TokenCache.setShuffleSecretKey(secret, creds);
        creds.writeTokenStorageFile(new org.apache.hadoop.fs.Path(containerDir.resolve("container_tokens").toString()),
                new Configuration(false));
    }

    @Test
    void shouldAnswerAConnectionFromMemoryAndLeaveTheSearchToTheMaintenanceThread() throws Exception {
        ServedJobs jobs = new ServedJobs(new Configuration(false), 0, 0); // no capture window after a start
        ApplicationId app = ApplicationId.newInstance(1_700_000_000_000L, 1);
        byte[] secret = "found-later".getBytes();
        writeTokens(containerDir(app), secret);
        ServedJobs.Job job = jobs.learn(app, USER, dirs(), true);
        jobs.containerStopped(app); // it ran and ended before anything looked
        jobs.captureSecrets();
        assertFalse(jobs.hasSecret(job.realm()), "nothing looks once no container runs and no window is open");

        assertNull(jobs.secretOf(job.realm()), "a connection's lookup reads no disk");
        jobs.captureSecrets(); // the maintenance thread, asked by that lookup
        assertArrayEquals(secret, jobs.secretOf(job.realm()));
    }

    @Test
    void shouldKeepLookingWhileAContainerRunsPastTheWindow() throws Exception {
        ServedJobs jobs = new ServedJobs(new Configuration(false), 0, 0);
        ApplicationId app = ApplicationId.newInstance(1_700_000_000_000L, 2);
        ServedJobs.Job job = jobs.learn(app, USER, dirs(), true); // localizing: no credentials file yet
        jobs.captureSecrets();
        assertFalse(jobs.hasSecret(job.realm()));
        writeTokens(containerDir(app), "launched".getBytes()); // launched, long after the start
        jobs.captureSecrets();
        assertTrue(jobs.hasSecret(job.realm()), "looked for while the container runs");
    }

    @Test
    void shouldForgetAJobOnlyWhenItStoppedOnEveryNodeManagerOfTheProcess() {
        ServedJobs jobs = new ServedJobs(new Configuration(false));
        ApplicationId app = ApplicationId.newInstance(1_700_000_000_000L, 3);
        LocalDirs nm1 = dirs();
        LocalDirs nm2 = dirs();
        ServedJobs.Job job = jobs.learn(app, USER, nm1, true);
        jobs.learn(app, USER, nm2, true);
        assertNull(jobs.stopped(app, nm1));
        assertEquals(job, jobs.job(job.realm()));
        assertEquals(job, jobs.stopped(app, nm2));
        assertNull(jobs.job(job.realm()));
        assertEquals("-", jobs.realmOf(job.shuffleId));
    }
}
