package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The jobs the service knows: learnt with the job token YARN hands it, each with its own secret, until it stops. */
class ServedJobsTest {
    private static final String USER = "bob";

    @TempDir
    Path dir;

    private LocalDirs dirs() {
        Configuration c = new Configuration(false);
        c.set(MapReduceRdmaConf.NM_LOCAL_DIRS, dir.toString());
        return new LocalDirs(null, c);
    }

    @Test
    void shouldAnswerEachJobsConnectionsWithItsTokensPasswordAndNoneForAJobNeverHanded() throws Exception {
        ServedJobs jobs = new ServedJobs();
        ApplicationId a = ServiceFixture.app(1);
        ApplicationId b = ServiceFixture.app(2);
        byte[] secretA = RdmaShuffleHandler.readJobToken(ServiceFixture.serviceData(a, "secret-A".getBytes()))
                .getPassword();
        ServedJobs.Job jobA = jobs.learn(a, USER, dirs(), secretA);
        jobs.learn(b, USER, dirs(), "secret-B".getBytes());
        assertArrayEquals("secret-A".getBytes(), jobs.secretOf(jobA.realm()));
        assertArrayEquals("secret-B".getBytes(), jobs.secretOf(ServiceFixture.jobOf(b).toString()));
        assertNull(jobs.secretOf(ServiceFixture.jobOf(ServiceFixture.app(3)).toString()));
        assertNull(jobs.secretOf(null));
        assertEquals(2, jobs.size());
    }

    @Test
    void shouldKeepTheFirstSecretWhenAJobIsHandedAgain() {
        ServedJobs jobs = new ServedJobs();
        ApplicationId app = ServiceFixture.app(4);
        byte[] first = "first-token".getBytes();
        ServedJobs.Job job = jobs.learn(app, USER, dirs(), first);
        first[0] = 'X'; // the caller's array is not the job's
        assertEquals(job, jobs.learn(app, USER, dirs(), "first-token".getBytes()));
        assertEquals(job, jobs.learn(app, USER, dirs(), "another-token".getBytes()));
        assertArrayEquals("first-token".getBytes(), jobs.secretOf(job.realm()));
        assertThrows(IllegalArgumentException.class, () -> jobs.learn(ServiceFixture.app(5), USER, dirs(), new byte[0]));
        assertFalse(jobs.hasSecret(ServiceFixture.jobOf(ServiceFixture.app(5)).toString()));
    }

    @Test
    void shouldForgetAJobOnlyWhenItStoppedOnEveryNodeManagerOfTheProcess() {
        ServedJobs jobs = new ServedJobs();
        ApplicationId app = ServiceFixture.app(3);
        LocalDirs nm1 = dirs();
        LocalDirs nm2 = dirs();
        ServedJobs.Job job = jobs.learn(app, USER, nm1, "s".getBytes());
        jobs.learn(app, USER, nm2, "s".getBytes());
        assertNull(jobs.stopped(app, nm1));
        assertEquals(job, jobs.job(job.realm()));
        assertTrue(jobs.hasSecret(job.realm()));
        assertEquals(job, jobs.stopped(app, nm2));
        assertNull(jobs.job(job.realm()));
        assertNull(jobs.secretOf(job.realm()), "a stopped job's connections are refused");
        assertEquals("-", jobs.realmOf(job.shuffleId));
    }

    @Test
    void shouldReadTheJobTokenHadoopSerializesAndRefuseWhatIsNoToken() throws Exception {
        ApplicationId app = ServiceFixture.app(6);
        ByteBuffer data = ServiceFixture.serviceData(app, "the-password".getBytes());
        int position = data.position();
        assertArrayEquals("the-password".getBytes(), RdmaShuffleHandler.readJobToken(data).getPassword());
        assertEquals(position, data.position(), "the buffer is left for Hadoop's side to read");

        assertThrows(IOException.class, () -> RdmaShuffleHandler.readJobToken(null));
        assertThrows(IOException.class, () -> RdmaShuffleHandler.readJobToken(ByteBuffer.allocate(0)));
        ByteBuffer cut = data.duplicate();
        cut.limit(cut.limit() - 3);
        assertThrows(IOException.class, () -> RdmaShuffleHandler.readJobToken(cut));
        // An identifier claiming 2^31-1 bytes: refused before anything of that size is allocated.
        ByteBuffer huge = ByteBuffer.wrap(new byte[] {(byte) 0x8c, 0x7f, (byte) 0xff, (byte) 0xff, (byte) 0xff, 1, 2});
        String why = assertThrows(IOException.class, () -> RdmaShuffleHandler.readJobToken(huge)).getMessage();
        assertTrue(why.contains("identifier claims 2147483647 bytes"), why);
        ByteBuffer big = ByteBuffer.allocate(RdmaShuffleHandler.MAX_SERVICE_DATA_BYTES + 1);
        assertThrows(IOException.class, () -> RdmaShuffleHandler.readJobToken(big));
        ByteBuffer noPassword = ServiceFixture.serviceData(app, new byte[0]);
        assertThrows(IOException.class, () -> RdmaShuffleHandler.readJobToken(noPassword));
    }
}
