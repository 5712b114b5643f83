package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.gatedNode;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.GatedChannel;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.serve.RegisteredMapOutput;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;

/**
 * A reduce task's waits count running time only — for the next block ({@link BlockFetcher#next}) and for a streamed
 * block's window: a pause of this JVM recorded meanwhile (by any thread) is added to them, so a reader that did not
 * run blames no peer for its own silence ({@link Pauses}).
 */
class FetchWaitPauseTest {
    private static final int WINDOW = 64 << 10;

    @Test
    @Timeout(60)
    void shouldAddAPauseOfThisJvmToTheWaitForTheNextBlockWhenAnotherThreadRecordedIt(@TempDir Path dir)
            throws Exception {
        withGatedFetcher(dir, new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp")), 1_000,
                (fetcher, gate) -> {
                    Thread other = pauseLater();
                    long waitFrom = System.nanoTime();
                    FetchFailure e = assertThrows(FetchFailure.class, fetcher::next); // its first READ is held
                    long waited = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - waitFrom);
                    other.join();
                    assertTrue(e.getMessage().contains("no block arrived within 3000 ms"), e.getMessage());
                    assertTrue(waited >= 3_800, "the wait failed after " + waited + " ms: its 3 s timeout and the "
                            + "1 s pause are 4 s");
                    return 0;
                });
    }

    @Test
    @Timeout(60)
    void shouldAddAPauseOfThisJvmToAStreamedWindowsWaitWhenAnotherThreadRecordedIt(@TempDir Path dir) throws Exception {
        RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.pool.maxBufferSize", "64k", "spark.shuffle.rdma.pool.chunkSize", "256k"));
        withGatedFetcher(dir, conf, 3 * WINDOW, (fetcher, gate) -> {
            gate.release(0);
            fetcher.progress();
            gate.release(1);
            try (BlockFetcher.Block s = fetcher.next()) {
                assertTrue(s.streamed());
                Thread other = pauseLater();
                long waitFrom = System.nanoTime();
                BlockFetcher.StreamFailed e = assertThrows(BlockFetcher.StreamFailed.class,
                        () -> s.open(0, s.length()).read());
                long waited = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - waitFrom);
                other.join();
                assertTrue(e.getMessage().contains("no block arrived within 3000 ms"), e.getMessage());
                assertTrue(waited >= 3_800, "the window's wait failed after " + waited + " ms: its 3 s timeout and "
                        + "the 1 s pause are 4 s");
            }
            return 2;
        });
    }

    /** What a test does with the fetcher; returns how many of the gate's posts it released. */
    private interface GatedBody {
        int run(BlockFetcher fetcher, GatedChannel gate) throws Exception;
    }

    /**
     * One map output of {@code bytes} random bytes, served by an executor's node and asked for (one block) by a
     * fetcher with a 3 s timeout whose completions wait behind a gate; {@code body} runs, then the fetcher closes
     * and every post it did not release is released.
     */
    private static void withGatedFetcher(Path dir, RdmaShuffleConf conf, int bytes, GatedBody body) throws Exception {
        long[] offsets = {0, bytes};
        byte[] data = new byte[bytes];
        new SplittableRandom(7).nextBytes(data);
        Path f = dir.resolve("shuffle_77_0_0.data");
        Files.write(f, data);
        try (RdmaNode executor = RdmaTransport.open(conf, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(conf, NodeOptions.loopback());
             RegisteredOutputTable table = new RegisteredOutputTable(executor, 77, 1);
             BufferPool pool = new BufferPool(BufferPoolOptions.from(conf), reducer.sinkRegistrar())) {
            table.publish(0, 0, RegisteredMapOutput.register(executor, f, new MapOutputLayout(offsets, 100_000)));
            GatedChannel[] gate = new GatedChannel[1];
            BlockFetcher fetcher = new BlockFetcher(gatedNode(reducer, gate), pool, 4 << 20, 16 << 10, 3_000);
            fetcher.add(new BlockFetcher.Request(executor.localAddress(), table.descriptor(), 0, 0, 0, 1));
            int released = body.run(fetcher, gate[0]);
            fetcher.close();
            for (int i = released; i < gate[0].postCount(); i++) {
                gate[0].release(i);
            }
        }
    }

    /** A thread that, 1.5 s from now, records a pause of this JVM of 1 s (as the watcher would). */
    private static Thread pauseLater() {
        Thread other = new Thread(() -> {
            try {
                Thread.sleep(1_500);
            } catch (InterruptedException e) {
                return;
            }
            long end = System.nanoTime();
            Pauses.record(end - TimeUnit.SECONDS.toNanos(1), end);
        });
        other.start();
        return other;
    }
}
