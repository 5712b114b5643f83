package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.mapreduce.JobID;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Block;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Request;

/**
 * The owner check reads a file's attributes again after the open by name (Java has no fstat of a channel), so a
 * file swapped in during the open and out again is what is served: a hard link a task made. Under security the
 * service serves outputs over READs only when the kernel's {@code fs.protected_hardlinks} is 1 (read from a file
 * the test writes), else over HTTP with one WARN naming the setting.
 */
@Timeout(60)
class OutputFileHardlinksTest {
    private static final int REDUCES = 3;
    private static final int REDUCE = 1;
    private static final String USER = System.getProperty("user.name");
    private static final Map<String, String> SECURE = Map.of("hadoop.security.authentication", "kerberos");

    @TempDir
    Path dir;
    private RunningService fx;
    private final byte[] secret = "secret-of-the-links".getBytes();

    @AfterEach
    void stop() {
        ShuffleServer.protectedHardlinks = LocalDirs.PROTECTED_HARDLINKS;
        if (fx != null) {
            fx.close();
        }
    }

    private JobID startWithSysctl(String value, int app) throws Exception {
        Path sysctl = dir.resolve("protected_hardlinks");
        Files.writeString(sysctl, value + "\n");
        ShuffleServer.protectedHardlinks = sysctl;
        fx = new RunningService(dir, SECURE);
        assertTrue(fx.server().ownerChecked());
        return ServiceFixture.initJob(fx.service, USER, app, secret);
    }

    private RegisterProtocol.Reply register(ReducerClient client, int map) throws Exception {
        RegisterProtocol.Reply reply = RunningService.register(client, fx.address(), 2, REDUCES, REDUCE,
                new MapAttempt(map, 0));
        assertEquals(RegisterProtocol.OK, reply.status(), reply.reason());
        return reply;
    }

    @Test
    void shouldServeOverHttpWithOneWarnWhenProtectedHardlinksIsOff() throws Exception {
        try (LoggedWarnings logged = LoggedWarnings.of(ShuffleServer.class)) {
            JobID job = startWithSysctl("0", 1);
            ServiceFixture.writeMapOutput(fx.localDir, USER, job, 0, 0, REDUCES, 1);
            ServiceFixture.writeMapOutput(fx.localDir, USER, job, 1, 0, REDUCES, 2);
            try (ReducerClient client = fx.reducer(job, secret)) {
                assertEquals(RegisterProtocol.VIA_HTTP, register(client, 0).maps()[0].state());
                assertEquals(RegisterProtocol.VIA_HTTP, register(client, 1).maps()[0].state());
            }
            List<String> warned = logged.messages().stream().filter(m -> m.contains("fs.protected_hardlinks"))
                    .toList();
            assertEquals(1, warned.size(), "one WARN naming the sysctl: " + logged.messages());
            assertTrue(warned.get(0).contains("served over HTTP only"), warned.get(0));
        }
    }

    @Test
    void shouldServeOverReadsWhenProtectedHardlinksIsOn() throws Exception {
        try (LoggedWarnings logged = LoggedWarnings.of(ShuffleServer.class)) {
            JobID job = startWithSysctl("1", 2);
            byte[][] parts = ServiceFixture.writeMapOutput(fx.localDir, USER, job, 0, 0, REDUCES, 3);
            try (ReducerClient client = fx.reducer(job, secret)) {
                RegisterProtocol.Reply reply = register(client, 0);
                assertEquals(RegisterProtocol.PUBLISHED, reply.maps()[0].state(), reply.reason());
                try (BlockFetcher f = client.newFetcher(1)) {
                    f.add(new Request(fx.address(), reply.table(), 0, 0, REDUCE, REDUCE + 1));
                    try (Block b = f.next()) {
                        byte[] bytes = new byte[(int) b.length()];
                        b.bytes().get(bytes);
                        assertArrayEquals(parts[REDUCE], bytes);
                    }
                }
            }
            assertEquals(List.of(), logged.messages().stream().filter(m -> m.contains("fs.protected_hardlinks"))
                    .toList());
        }
    }
}
