package org.rdmashuffle.shuffle.core.serve;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.shuffle.core.directory.NoPeerDirectory;

/** Closing a server while a stopped shuffle's outputs are still queued for deregistration on another thread. */
class MapOutputServerCloseTest {
    private static final RdmaShuffleConf TCP = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp"));

    @Test
    @Timeout(60)
    void shouldCloseEveryTableBeforeTheNodeWhenAStoppedShufflesDeregistrationIsStillQueued(@TempDir Path dir)
            throws Exception {
        byte[] bytes = new byte[300_000];
        Path data = Files.write(dir.resolve("shuffle_1_0_0.data"), bytes);
        CountDownLatch workerHeld = new CountDownLatch(1);
        CountDownLatch releaseWorker = new CountDownLatch(1);
        AtomicReference<Throwable> workerFailure = new AtomicReference<>();
        ExecutorService worker = Executors.newSingleThreadExecutor(r -> new Thread(() -> {
            try {
                r.run();
            } catch (Throwable t) {
                workerFailure.set(t);
            }
        }, "test-job-stop"));
        try {
            MapOutputServer server = new MapOutputServer(TCP, "127.0.0.1", null, new NoPeerDirectory(), "close-test");
            int idle = server.node().stats().registeredRegions();
            server.publish(1, 2, 0, 10, data.toFile(), new long[] {0, 100_000, 300_000});
            server.publish(1, 2, 1, 11, data.toFile(), new long[] {0, 300_000});
            server.publish(2, 1, 0, 20, data.toFile(), new long[] {0, 300_000});
            assertEquals(900_000, server.registeredOutputBytes());
            assertTrue(server.node().stats().registeredRegions() > idle);
            worker.execute(() -> { // the worker is busy with an earlier stop
                workerHeld.countDown();
                try {
                    releaseWorker.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            workerHeld.await();
            server.unregisterShuffle(1, worker); // queued behind it: still registered
            assertEquals(900_000, server.registeredOutputBytes());

            server.close();

            assertEquals(0, server.registeredOutputBytes(),
                    "close() went to the node while a stopped shuffle's outputs were still registered (queued on"
                            + " the worker, which would deregister them after the node closed)");
            assertEquals(0, server.node().stats().registeredRegions());
        } finally {
            releaseWorker.countDown();
            worker.shutdown();
            assertTrue(worker.awaitTermination(30, TimeUnit.SECONDS));
        }
        assertNull(workerFailure.get(), "the queued deregistration, run after close, failed");
    }
}
