package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import org.apache.hadoop.mapreduce.JobID;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Block;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Request;
import org.rdmashuffle.transport.NodeAddress;

/**
 * A task owns its attempt's directory and can swap what is in it at any moment: a link planted between the service's
 * check of a map output's files and their use must not make the service serve another file. What a reducer gets is
 * the file checked, or nothing (the output goes over HTTP).
 */
@Timeout(60)
class OutputFileRaceTest {
    private static final int[] SIZES = {1000, 20_000, 3000, 40_000};
    private static final int REDUCE = 1;

    @TempDir
    Path dir;
    @TempDir
    Path elsewhere;
    private RunningService fx;
    private final byte[] secret = "secret-of-the-race".getBytes();

    @BeforeEach
    void start() throws Exception {
        fx = new RunningService(dir);
    }

    @AfterEach
    void stop() {
        fx.server().fileSteps(ShuffleServer.FileSteps.NONE);
        fx.close();
    }

    /** Registers map 0's attempt 0 for {@link #REDUCE}; its bytes if READ, else null (left to HTTP or missing). */
    private byte[] registerAndRead(JobID job) throws Exception {
        try (ReducerClient client = fx.reducer(job, secret)) {
            NodeAddress at = fx.address();
            RegisterProtocol.Reply reply = RunningService.register(client, at, 1, SIZES.length, REDUCE,
                    new MapAttempt(0, 0));
            assertEquals(RegisterProtocol.OK, reply.status(), reply.reason());
            if (reply.maps()[0].state() != RegisterProtocol.PUBLISHED) {
                return null;
            }
            try (BlockFetcher f = client.newFetcher(1)) {
                f.add(new Request(at, reply.table(), 0, 0, REDUCE, REDUCE + 1));
                try (Block b = f.next()) {
                    if (b.unregistered()) {
                        return null;
                    }
                    byte[] bytes = new byte[(int) b.length()];
                    b.bytes().get(bytes);
                    return bytes;
                }
            }
        }
    }

    private static void swapForLink(Path path, Path target) {
        try {
            Files.move(path, path.resolveSibling(path.getFileName() + ".moved"));
            Files.createSymbolicLink(path, target);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Test
    void shouldServeTheCheckedFileOrNothingWhenTheAttemptDirectoryBecomesALinkAfterTheCheck() throws Exception {
        JobID job = fx.runJob(1, secret);
        byte[][] checked = fx.writeMapOutput(job, 0, 0, 1, SIZES);
        byte[][] other = RunningService.writeOutputFiles(elsewhere, 2, SIZES); // same lengths, other bytes
        Path attempt = fx.attemptDir(job, 0, 0);
        fx.server().fileSteps(new ShuffleServer.FileSteps() {
            @Override
            public void located(File index, File data) {
                swapForLink(attempt, elsewhere);
            }
        });
        byte[] served = registerAndRead(job);
        if (served != null) {
            assertFalse(Arrays.equals(other[REDUCE], served), "served the bytes of the file behind the planted link");
            assertArrayEquals(checked[REDUCE], served);
        }
    }

    @Test
    void shouldServeTheCheckedFileOrNothingWhenTheDataFileBecomesALinkAfterItsIndexWasRead() throws Exception {
        JobID job = fx.runJob(2, secret);
        byte[][] checked = fx.writeMapOutput(job, 0, 0, 3, SIZES);
        byte[][] other = RunningService.writeOutputFiles(elsewhere, 4, SIZES);
        Path data = fx.attemptDir(job, 0, 0).resolve("file.out");
        fx.server().fileSteps(new ShuffleServer.FileSteps() {
            @Override
            public void indexRead(File index, File dataFile) {
                swapForLink(data, elsewhere.resolve("file.out"));
            }
        });
        byte[] served = registerAndRead(job);
        if (served != null) {
            assertFalse(Arrays.equals(other[REDUCE], served), "served the bytes of the file behind the planted link");
            assertArrayEquals(checked[REDUCE], served);
        }
    }

    @Test
    void shouldAnswerMissingRatherThanAnotherIndexWhenADroppedIndexIsReadAgainThroughALink() throws Exception {
        fx.close();
        fx = new RunningService(dir.resolve("again"), java.util.Map.of(MapReduceRdmaConf.INDEX_CACHE_MAX_BYTES,
                "0")); // holds no index: every REGISTER after the first reads the index file again
        JobID job = fx.runJob(4, secret);
        byte[][] checked = fx.writeMapOutput(job, 0, 0, 7, SIZES);
        int[] otherSizes = {SIZES[0], SIZES[1] + SIZES[2], 0, SIZES[3]}; // the same data file's length
        RunningService.writeOutputFiles(elsewhere, 8, otherSizes);
        try (ReducerClient client = fx.reducer(job, secret)) {
            RegisterProtocol.Reply first = RunningService.register(client, fx.address(), 1, SIZES.length, REDUCE,
                    new MapAttempt(0, 0));
            assertEquals(RegisterProtocol.PUBLISHED, first.maps()[0].state(), first.reason());
            assertEquals(checked[REDUCE].length, first.maps()[0].partLength());
            swapForLink(fx.attemptDir(job, 0, 0), elsewhere);
            RegisterProtocol.Reply again = RunningService.register(client, fx.address(), 1, SIZES.length, REDUCE,
                    new MapAttempt(0, 0));
            assertEquals(RegisterProtocol.OK, again.status(), again.reason());
            assertFalse(again.maps()[0].state() == RegisterProtocol.PUBLISHED
                            && again.maps()[0].partLength() == otherSizes[REDUCE],
                    "answered with the lengths of the index behind the planted link");
            assertEquals(RegisterProtocol.MISSING, again.maps()[0].state());
        }
    }

    @Test
    void shouldServeNothingWhenTheDataFileBecomesALinkBeforeItIsOpened() throws Exception {
        JobID job = fx.runJob(3, secret);
        fx.writeMapOutput(job, 0, 0, 5, SIZES);
        byte[][] other = RunningService.writeOutputFiles(elsewhere, 6, SIZES);
        Path data = fx.attemptDir(job, 0, 0).resolve("file.out");
        fx.server().fileSteps(new ShuffleServer.FileSteps() {
            @Override
            public void located(File index, File dataFile) {
                swapForLink(data, elsewhere.resolve("file.out"));
            }
        });
        byte[] served = registerAndRead(job);
        assertFalse(served != null && Arrays.equals(other[REDUCE], served),
                "served the bytes of the file behind the planted link");
        assertEquals(null, served, "a link is never opened: the output goes over HTTP");
    }
}
