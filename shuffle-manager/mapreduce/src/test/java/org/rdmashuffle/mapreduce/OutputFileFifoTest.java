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
            assumeTrue(false, "no mkfifo on this machine: " + e);
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
}
