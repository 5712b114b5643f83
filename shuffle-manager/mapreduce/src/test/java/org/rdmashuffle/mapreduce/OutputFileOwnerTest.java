package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.UserPrincipal;
import java.util.Map;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Block;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Request;

/**
 * Under Hadoop security, {@code ShuffleHandler} serves a map output only if its files are owned by the job's user
 * ({@code SecureIOUtils}); the service's READs must not serve more. Real files, chowned (as root) to another user.
 */
@Timeout(60)
class OutputFileOwnerTest {
    private static final int REDUCES = 3;
    private static final int REDUCE = 1;
    /** The user the test runs as: the job's user, so the files it writes are the job user's own. */
    private static final String USER = System.getProperty("user.name");
    private static final Map<String, String> SECURE = Map.of("hadoop.security.authentication", "kerberos");

    @TempDir
    Path dir;
    private RunningService fx;
    private final byte[] secret = "secret-of-the-owner".getBytes();

    @AfterEach
    void stop() {
        if (fx != null) {
            fx.close();
        }
    }

    private JobID runJob(Map<String, String> settings, int app) throws Exception {
        fx = new RunningService(dir, settings);
        return ServiceFixture.initJob(fx.service, USER, app, secret);
    }

    private Path attemptDir(JobID job, int map) {
        TaskAttemptID id = new TaskAttemptID(new TaskID(job, TaskType.MAP, map), 0);
        return fx.localDir.resolve(LocalDirs.appBase(USER, ServiceFixture.appOf(job).toString())).resolve("output")
                .resolve(id.toString());
    }

    private static void giveToNobody(Path file) throws IOException {
        assumeTrue("root".equals(USER), "changing a file's owner needs root; this test runs as " + USER);
        UserPrincipal nobody;
        try {
            nobody = file.getFileSystem().getUserPrincipalLookupService().lookupPrincipalByName("nobody");
        } catch (IOException e) {
            org.junit.jupiter.api.Assumptions.abort("this machine has no user 'nobody' to give a file to: " + e);
            return;
        }
        Files.setOwner(file, nobody);
        assertEquals("nobody", Files.getOwner(file).getName());
    }

    /** Registers map {@code map}'s attempt 0 for {@link #REDUCE}; its bytes if READ, else null. */
    private byte[] registerAndRead(JobID job, int map) throws Exception {
        try (ReducerClient client = fx.reducer(job, secret)) {
            RegisterProtocol.Reply reply = RunningService.register(client, fx.address(), 2, REDUCES, REDUCE,
                    new MapAttempt(map, 0));
            assertEquals(RegisterProtocol.OK, reply.status(), reply.reason());
            if (reply.maps()[0].state() != RegisterProtocol.PUBLISHED) {
                assertEquals(RegisterProtocol.MISSING, reply.maps()[0].state(), "refused as a file not plain is");
                return null;
            }
            try (BlockFetcher f = client.newFetcher(1)) {
                f.add(new Request(fx.address(), reply.table(), map, 0, REDUCE, REDUCE + 1));
                try (Block b = f.next()) {
                    byte[] bytes = new byte[(int) b.length()];
                    b.bytes().get(bytes);
                    return bytes;
                }
            }
        }
    }

    @Test
    void shouldRefuseADataFileOfAnotherUserWhenSecurityIsOn() throws Exception {
        JobID job = runJob(SECURE, 1);
        assertTrue(fx.server().ownerChecked());
        ServiceFixture.writeMapOutput(fx.localDir, USER, job, 0, 0, REDUCES, 1);
        giveToNobody(attemptDir(job, 0).resolve(IndexCache.DATA));
        assertEquals(null, registerAndRead(job, 0), "served a data file owned by nobody");
        assertEquals(1, fx.server().wrongOwners());
    }

    @Test
    void shouldServeTheJobUsersOwnFilesWhenSecurityIsOn() throws Exception {
        JobID job = runJob(SECURE, 2);
        byte[][] parts = ServiceFixture.writeMapOutput(fx.localDir, USER, job, 1, 0, REDUCES, 2);
        assertArrayEquals(parts[REDUCE], registerAndRead(job, 1));
        assertEquals(0, fx.server().wrongOwners());
    }

    @Test
    void shouldServeFilesOfAnotherUserWhenSecurityIsOff() throws Exception {
        JobID job = runJob(Map.of(), 3);
        assertFalse(fx.server().ownerChecked());
        byte[][] parts = ServiceFixture.writeMapOutput(fx.localDir, USER, job, 0, 0, REDUCES, 3);
        giveToNobody(attemptDir(job, 0).resolve(IndexCache.DATA));
        giveToNobody(attemptDir(job, 0).resolve(IndexCache.INDEX));
        assertArrayEquals(parts[REDUCE], registerAndRead(job, 0));
    }

    @Test
    void shouldAnswerMissingWhenADroppedIndexReadAgainIsOfAnotherUserWhenSecurityIsOn() throws Exception {
        Map<String, String> settings = new java.util.HashMap<>(SECURE);
        settings.put(MapReduceRdmaConf.INDEX_CACHE_MAX_BYTES, "0"); // every later REGISTER reads the index again
        JobID job = runJob(settings, 4);
        byte[][] parts = ServiceFixture.writeMapOutput(fx.localDir, USER, job, 0, 0, REDUCES, 4);
        assertArrayEquals(parts[REDUCE], registerAndRead(job, 0));
        giveToNobody(attemptDir(job, 0).resolve(IndexCache.INDEX));
        try (ReducerClient client = fx.reducer(job, secret)) {
            RegisterProtocol.Reply again = RunningService.register(client, fx.address(), 2, REDUCES, REDUCE,
                    new MapAttempt(0, 0));
            assertEquals(RegisterProtocol.MISSING, again.maps()[0].state(), again.reason());
        }
        assertEquals(1, fx.server().wrongOwners());
    }
}
