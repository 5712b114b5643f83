package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
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

/**
 * A task can swap a FIFO in at a map output's name between the service's check of the file and its open, and an
 * open of a FIFO's read end waits for a writer: that must not hold a register worker (every job's REGISTERs would
 * then be answered busy). The REGISTER is answered, the output goes over HTTP, and the workers serve on.
 */
@Timeout(30)
class OutputFileFifoTest {
    private static final int[] SIZES = {1000, 20_000, 3000};
    private static final int REDUCE = 1;
    /** Maps whose data file becomes a FIFO; more than the register workers. */
    private static final int FIFO_MAPS = ShuffleServer.REGISTER_THREADS + 1;
    private static final int MAPS = FIFO_MAPS + 1;

    @TempDir
    Path dir;
    private RunningService fx;
    private final byte[] secret = "secret-of-the-fifo".getBytes();

    @BeforeEach
    void start() throws Exception {
        fx = new RunningService(dir);
        fx.server().opener().boundMs(300); // the default waits longer for a slow disk
    }

    @AfterEach
    void stop() {
        fx.server().fileSteps(ShuffleServer.FileSteps.NONE);
        fx.close();
    }

    private static void swapForFifo(Path file) {
        try {
            Files.move(file, file.resolveSibling(file.getFileName() + ".moved"));
            Process mkfifo = new ProcessBuilder("mkfifo", file.toString()).redirectErrorStream(true).start();
            assumeTrue(mkfifo.waitFor() == 0, "mkfifo failed: " + new String(mkfifo.getInputStream().readAllBytes()));
        } catch (IOException e) {
            org.junit.jupiter.api.Assumptions.abort("no mkfifo on this machine: " + e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    @Test
    void shouldAnswerAndServeOnWhenAFifoIsSwappedInBetweenTheCheckAndTheOpen() throws Exception {
        JobID job = fx.runJob(1, secret);
        byte[][] plain = null;
        Set<Path> fifos = ConcurrentHashMap.newKeySet();
        for (int map = 0; map < MAPS; map++) {
            byte[][] parts = fx.writeMapOutput(job, map, 0, map, SIZES);
            if (map < FIFO_MAPS) {
                fifos.add(fx.attemptDir(job, map, 0).resolve(IndexCache.DATA));
            } else {
                plain = parts;
            }
        }
        fx.server().fileSteps(new ShuffleServer.FileSteps() {
            @Override
            public void checked(String shown) {
                Path file = Path.of(shown);
                if (fifos.remove(file)) { // checked as a plain file: now a FIFO until it is opened
                    swapForFifo(file);
                }
            }
        });
        try (ReducerClient client = fx.reducer(job, secret)) {
            for (int map = 0; map < FIFO_MAPS; map++) {
                RegisterProtocol.Reply reply = RunningService.register(client, fx.address(), MAPS, SIZES.length,
                        REDUCE, new MapAttempt(map, 0));
                assertEquals(RegisterProtocol.OK, reply.status(), reply.reason());
                assertEquals(RegisterProtocol.VIA_HTTP, reply.maps()[0].state(), "map " + map + ": a FIFO not served");
                assertEquals(true, Files.isRegularFile(fx.attemptDir(job, map, 0).resolve(IndexCache.DATA)
                        .resolveSibling(IndexCache.DATA + ".moved")), "the FIFO was planted");
            }
            assertEquals(FIFO_MAPS, fx.server().opener().refused());
            // The workers are free: the next output is registered and READ.
            RegisterProtocol.Reply reply = RunningService.register(client, fx.address(), MAPS, SIZES.length, REDUCE,
                    new MapAttempt(FIFO_MAPS, 0));
            assertEquals(RegisterProtocol.PUBLISHED, reply.maps()[0].state(), reply.reason());
            try (BlockFetcher f = client.newFetcher(1)) {
                f.add(new Request(fx.address(), reply.table(), FIFO_MAPS, 0, REDUCE, REDUCE + 1));
                try (Block b = f.next()) {
                    byte[] bytes = new byte[(int) b.length()];
                    b.bytes().get(bytes);
                    assertArrayEquals(plain[REDUCE], bytes);
                }
            }
        }
        // The opens stuck on the FIFOs were let go (their write ends opened by the service): no thread stays.
        while (fx.server().opener().opening() > 0) {
            Thread.sleep(10);
        }
    }

    /** Registers {@code map}'s attempt 0 of {@code job} (outputs of {@link #SIZES}) and says its state. */
    private byte register(ReducerClient client, int map) throws Exception {
        RegisterProtocol.Reply reply = RunningService.register(client, fx.address(), MAPS, SIZES.length, REDUCE,
                new MapAttempt(map, 0));
        assertEquals(RegisterProtocol.OK, reply.status(), reply.reason());
        return reply.maps()[0].state();
    }

    @Test
    void shouldSendOnlyThatJobsOutputsOverHttpWhenItsStuckOpensReachTheirCap() throws Exception {
        fx.server().opener().unblocks(false); // as for a FIFO the service may not write: its opens stay stuck
        int stuckMaps = OutputFileOpener.MAX_STUCK_PER_JOB;
        JobID greedy = fx.runJob(1, secret);
        byte[] otherSecret = "secret-of-the-other".getBytes();
        JobID other = fx.runJob(2, otherSecret);
        Set<Path> fifos = ConcurrentHashMap.newKeySet();
        for (int map = 0; map < stuckMaps; map++) {
            fx.writeMapOutput(greedy, map, 0, map, SIZES);
            if (map < stuckMaps) {
                fifos.add(fx.attemptDir(greedy, map, 0).resolve(IndexCache.DATA));
            }
        }
        byte[][] greedyPlain = fx.writeMapOutput(greedy, stuckMaps, 0, 7, SIZES);
        byte[][] otherPlain = fx.writeMapOutput(other, 0, 0, 8, SIZES);
        Set<Path> planted = Set.copyOf(fifos);
        fx.server().fileSteps(new ShuffleServer.FileSteps() {
            @Override
            public void checked(String shown) {
                Path file = Path.of(shown);
                if (fifos.remove(file)) {
                    swapForFifo(file);
                }
            }
        });
        try (LoggedWarnings logged = LoggedWarnings.of(OutputFileOpener.class)) {
            try (ReducerClient client = fx.reducer(greedy, secret)) {
                for (int map = 0; map < stuckMaps; map++) {
                    assertEquals(RegisterProtocol.VIA_HTTP, register(client, map), "map " + map + ": a FIFO");
                }
                assertEquals(stuckMaps, fx.server().opener().opening(), "its opens stay stuck");
                // Past its cap the job's plain outputs go over HTTP too, with one WARN for the job.
                assertEquals(RegisterProtocol.VIA_HTTP, register(client, stuckMaps));
                assertEquals(RegisterProtocol.VIA_HTTP, register(client, stuckMaps));
                assertEquals(1, logged.messages().stream().filter(m -> m.contains("stuck")).count(),
                        logged.messages().toString());
            }
            // Another job's outputs are registered and READ meanwhile.
            try (ReducerClient client = fx.reducer(other, otherSecret)) {
                assertEquals(RegisterProtocol.PUBLISHED, register(client, 0));
                assertArrayEquals(otherPlain[REDUCE], read(client, 0));
            }
        } finally {
            for (Path fifo : planted) { // a writer comes: the stuck opens return
                try (var end = java.nio.channels.FileChannel.open(fifo, java.nio.file.StandardOpenOption.READ,
                        java.nio.file.StandardOpenOption.WRITE)) {
                    assertEquals(true, end.isOpen());
                }
            }
        }
        while (fx.server().opener().opening() > 0) {
            Thread.sleep(10);
        }
        // Its opens returned: the job's outputs are served again.
        try (ReducerClient client = fx.reducer(greedy, secret)) {
            assertEquals(RegisterProtocol.PUBLISHED, register(client, stuckMaps));
            assertArrayEquals(greedyPlain[REDUCE], read(client, stuckMaps));
        }
    }

    private byte[] read(ReducerClient client, int map) throws Exception {
        RegisterProtocol.Reply reply = RunningService.register(client, fx.address(), MAPS, SIZES.length, REDUCE,
                new MapAttempt(map, 0));
        assertEquals(RegisterProtocol.PUBLISHED, reply.maps()[0].state(), reply.reason());
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
