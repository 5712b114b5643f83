package org.rdmashuffle.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;

class BufferPoolTest {

    private static BufferPoolOptions options(Map<String, String> settings) {
        return BufferPoolOptions.from(new RdmaShuffleConf(settings));
    }

    private static BufferPoolOptions small(String cap, String timeout, String leaks) {
        return options(Map.of(
                "spark.shuffle.rdma.pool.minBufferSize", "4k",
                "spark.shuffle.rdma.pool.maxBufferSize", "64k",
                "spark.shuffle.rdma.pool.chunkSize", "128k",
                "spark.shuffle.rdma.pool.maxRegisteredBytes", cap,
                "spark.shuffle.rdma.pool.acquireTimeout", timeout,
                "spark.shuffle.rdma.pool.leakDetection", leaks));
    }

    @Test
    @Timeout(120)
    void shouldNeverGiveOneBufferToTwoOwnersWhenSixteenThreadsShareThePool() throws Exception {
        CountingRegistrar registrar = new CountingRegistrar();
        Set<RegisteredBuffer> owned = ConcurrentHashMap.newKeySet();
        AtomicReference<String> failure = new AtomicReference<>();
        try (BufferPool pool = new BufferPool(small("4m", "20s", "paranoid"), registrar)) {
            ExecutorService threads = Executors.newFixedThreadPool(16);
            CountDownLatch start = new CountDownLatch(1);
            List<Future<?>> done = new ArrayList<>();
            for (int t = 0; t < 16; t++) {
                final byte mark = (byte) (t + 1);
                final long seed = t;
                done.add(threads.submit(() -> {
                    SplittableRandom rnd = new SplittableRandom(seed);
                    start.await();
                    for (int i = 0; i < 3000; i++) {
                        int size = 1 + rnd.nextInt(96 << 10); // some above the largest class
                        RegisteredBuffer b = pool.acquire(size);
                        if (!owned.add(b)) {
                            failure.compareAndSet(null, "buffer handed to two owners");
                        }
                        if (b.capacity() < size || b.refCnt() != 1) {
                            failure.compareAndSet(null, "bad buffer " + b + " for " + size);
                        }
                        ByteBuffer bb = b.byteBuffer();
                        for (int j = 0; j < size; j += 512) {
                            bb.put(j, mark);
                        }
                        bb.put(size - 1, mark);
                        Thread.yield();
                        for (int j = 0; j < size; j += 512) {
                            if (bb.get(j) != mark) {
                                failure.compareAndSet(null, "another owner wrote into a buffer");
                            }
                        }
                        if (bb.get(size - 1) != mark) {
                            failure.compareAndSet(null, "another owner wrote into a buffer's end");
                        }
                        owned.remove(b);
                        b.release();
                    }
                    return null;
                }));
            }
            start.countDown();
            for (Future<?> f : done) {
                f.get(100, TimeUnit.SECONDS);
            }
            threads.shutdown();
            assertEquals(null, failure.get());
            BufferPoolStats s = pool.stats();
            assertEquals(16 * 3000, s.acquires());
            assertEquals(s.acquires(), s.releases());
            assertEquals(s.acquires(), s.hits() + s.misses());
            assertEquals(0, s.inUseBuffers());
            assertEquals(0, s.inUseBytes());
            assertEquals(0, s.leaksDetected());
            assertTrue(s.registeredBytes() <= 4 << 20, "cap exceeded: " + s);
            assertEquals(registrar.liveBytes.get(), s.registeredBytes());
        }
        assertEquals(0, registrar.live.get());
        assertEquals(0, registrar.doubleCloses.get());
    }

    @Test
    @Timeout(30)
    void shouldWaitAtCapThenFailWithClearErrorWhenNothingIsReleased() {
        try (BufferPool pool = new BufferPool(small("256k", "300ms", "disabled"), new CountingRegistrar())) {
            List<RegisteredBuffer> held = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                held.add(pool.acquire(64 << 10)); // two chunks of two 64k buffers
            }
            long t0 = System.nanoTime();
            BufferPoolException e = assertThrows(BufferPoolException.class, () -> pool.acquire(64 << 10));
            long waitedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTrue(waitedMs >= 250, "gave up after " + waitedMs + " ms");
            assertTrue(e.getMessage().contains("buffer pool exhausted"), e.getMessage());
            assertFalse(e.memoryUnavailable(), "a pool at its own cap is not the host's trouble");
            assertTrue(e.getMessage().contains("spark.shuffle.rdma.pool.maxRegisteredBytes"), e.getMessage());
            assertTrue(e.getMessage().contains("256k"), e.getMessage());
            BufferPoolStats s = pool.stats();
            assertEquals(1, s.waits());
            assertEquals(1, s.timeouts());
            assertEquals(256 << 10, s.registeredBytes());
            held.forEach(RegisteredBuffer::release);
        }
    }

    @Test
    @Timeout(30)
    void shouldHandBufferToWaiterWhenAnotherThreadReleasesAtCap() throws Exception {
        try (BufferPool pool = new BufferPool(small("128k", "20s", "disabled"), new CountingRegistrar())) {
            RegisteredBuffer a = pool.acquire(64 << 10);
            RegisteredBuffer b = pool.acquire(64 << 10);
            ExecutorService other = Executors.newSingleThreadExecutor();
            Future<RegisteredBuffer> waiter = other.submit(() -> pool.acquire(64 << 10));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (pool.stats().waits() == 0 && System.nanoTime() < deadline) {
                Thread.onSpinWait();
            }
            assertEquals(1, pool.stats().waits());
            a.release();
            RegisteredBuffer got = waiter.get(10, TimeUnit.SECONDS);
            assertSame(a, got, "the released buffer is the only one free");
            got.release();
            b.release();
            other.shutdown();
            assertEquals(0, pool.stats().timeouts());
        }
    }

    @Test
    @Timeout(60)
    void shouldHandCachedBuffersToWaiterWhenTheyAreReleasedWhileItReclaimsMemoryAtCap() throws Exception {
        GatedRegistrar registrar = new GatedRegistrar();
        ExecutorService releaser = Executors.newSingleThreadExecutor();
        ExecutorService waiter = Executors.newSingleThreadExecutor();
        try (BufferPool pool = new BufferPool(small("256k", "10m", "disabled"), registrar)) {
            pool.acquire(4 << 10).release(); // an idle chunk of the 4k class, in this thread's cache
            List<RegisteredBuffer> held = releaser.submit(() -> List.of(pool.acquire(64 << 10),
                    pool.acquire(64 << 10))).get(); // the other chunk: the pool is at its cap
            registrar.gateNextClose();
            // Needs the whole cap: the waiter must deregister the idle chunk, then the one the releaser holds.
            Future<RegisteredBuffer> large = waiter.submit(() -> pool.acquire(200 << 10));
            assertTrue(registrar.closing.await(30, TimeUnit.SECONDS), "the waiter never reclaimed the idle chunk");
            // While the waiter deregisters the idle chunk, the releaser returns its buffers to its own cache.
            releaser.submit(() -> held.forEach(RegisteredBuffer::release)).get();
            registrar.proceed.countDown();
            RegisteredBuffer got = large.get(); // bounded by @Timeout, far below the 10 min acquire timeout
            assertEquals(200 << 10, got.capacity());
            got.release();
            BufferPoolStats s = pool.stats();
            assertEquals(0, s.timeouts());
            assertEquals(0, s.inUseBuffers());
            assertEquals(registrar.counting.liveBytes.get(), s.registeredBytes());
        } finally {
            registrar.proceed.countDown();
            releaser.shutdownNow();
            waiter.shutdownNow();
        }
        assertEquals(0, registrar.counting.live.get());
    }

    @Test
    @Timeout(30)
    void shouldReuseBuffersCachedByAThreadWhenThatThreadHasEnded() throws Exception {
        CountingRegistrar registrar = new CountingRegistrar();
        try (BufferPool pool = new BufferPool(small("1m", "1s", "disabled"), registrar)) {
            Set<RegisteredBuffer> cachedByTheDead = ConcurrentHashMap.newKeySet();
            Thread worker = new Thread(() -> {
                RegisteredBuffer a = pool.acquire(64 << 10);
                RegisteredBuffer b = pool.acquire(64 << 10);
                cachedByTheDead.add(a);
                cachedByTheDead.add(b);
                a.release(); // both into the worker's thread cache
                b.release();
            }, "short-lived");
            worker.start();
            worker.join();
            assertEquals(1, pool.stats().registrations());
            RegisteredBuffer x = pool.acquire(64 << 10);
            RegisteredBuffer y = pool.acquire(64 << 10);
            assertEquals(cachedByTheDead, Set.of(x, y), "the ended thread's cached buffers were not reused");
            BufferPoolStats s = pool.stats();
            assertEquals(1, s.registrations(), s.toString());
            assertEquals(1, s.misses(), s.toString());
            assertEquals(128 << 10, s.registeredBytes());
            assertEquals(4, s.acquires());
            assertEquals(2, s.inUseBuffers());
            x.release();
            y.release();
            s = pool.stats();
            assertEquals(0, s.inUseBuffers());
            assertEquals(0, s.inUseBytes());
            assertEquals(s.acquires(), s.releases());
        }
        assertEquals(0, registrar.live.get());
    }

    @Test
    @Timeout(30)
    void shouldReturnNullWithoutWaitingWhenTryAcquireFindsThePoolAtItsCap() {
        try (BufferPool pool = new BufferPool(small("128k", "10m", "disabled"), new CountingRegistrar())) {
            RegisteredBuffer a = pool.tryAcquire(64 << 10);
            RegisteredBuffer b = pool.tryAcquire(64 << 10);
            assertTrue(a != null && b != null);
            assertEquals(null, pool.tryAcquire(64 << 10)); // at the cap: no wait (10 min would fail @Timeout)
            assertEquals(null, pool.tryAcquire(100 << 10));
            BufferPoolStats s = pool.stats();
            assertEquals(0, s.waits());
            assertEquals(0, s.timeouts());
            assertEquals(2, s.inUseBuffers());
            a.release();
            RegisteredBuffer c = pool.tryAcquire(60 << 10);
            assertSame(a, c);
            c.release();
            b.release();
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    @Test
    @Timeout(30)
    void shouldFailAtOnceWithoutReclaimingAnythingWhenSizeExceedsTheCap() {
        CountingRegistrar registrar = new CountingRegistrar();
        try (BufferPool pool = new BufferPool(small("256k", "10m", "disabled"), registrar)) {
            List<RegisteredBuffer> small = new ArrayList<>();
            for (int i = 0; i < 64; i++) {
                small.add(pool.acquire(4 << 10)); // fills two 128k chunks of the 4k class: the pool is at its cap
            }
            small.forEach(RegisteredBuffer::release); // cached by this thread, chunks idle
            long hits = pool.stats().threadCacheHits();
            int tooLarge = (256 << 10) + 1;
            BufferPoolException e = assertThrows(BufferPoolException.class, () -> pool.tryAcquire(tooLarge));
            assertTrue(e.getMessage().contains("spark.shuffle.rdma.pool.maxRegisteredBytes"), e.getMessage());
            assertTrue(e.getMessage().contains("exceeds the cap"), e.getMessage());
            // acquire does not wait either: 10 min of acquireTimeout would fail @Timeout.
            e = assertThrows(BufferPoolException.class, () -> pool.acquire(tooLarge));
            assertTrue(e.getMessage().contains("spark.shuffle.rdma.pool.maxRegisteredBytes"), e.getMessage());
            BufferPoolStats s = pool.stats();
            assertEquals(0, s.deregistrations(), "idle chunks deregistered for a request that can never fit");
            assertEquals(256 << 10, s.registeredBytes());
            assertEquals(2, registrar.live.get());
            assertEquals(0, s.waits());
            assertEquals(0, s.inUseBuffers());
            RegisteredBuffer again = pool.acquire(4 << 10);
            assertEquals(hits + 1, pool.stats().threadCacheHits(), "the thread's cache was drained");
            again.release();
        }
    }

    @Test
    @Timeout(30)
    void shouldDeregisterEmptyChunksOfOtherClassesWhenAtCap() {
        CountingRegistrar registrar = new CountingRegistrar();
        try (BufferPool pool = new BufferPool(small("256k", "1s", "disabled"), registrar)) {
            List<RegisteredBuffer> small = new ArrayList<>();
            for (int i = 0; i < 64; i++) {
                small.add(pool.acquire(4 << 10)); // fills two 128k chunks of the 4k class
            }
            assertEquals(256 << 10, pool.stats().registeredBytes());
            small.forEach(RegisteredBuffer::release); // cached by this thread, chunks idle
            RegisteredBuffer big = pool.acquire(64 << 10);
            assertEquals(64 << 10, big.capacity());
            BufferPoolStats s = pool.stats();
            assertEquals(1, s.deregistrations());
            assertEquals(256 << 10, s.registeredBytes());
            assertEquals(0, s.timeouts());
            big.release();
        }
        assertEquals(0, registrar.live.get());
    }

    @Test
    @Timeout(60)
    void shouldDetectAndTakeBackBufferWhenDroppedWithoutRelease() throws Exception {
        try (BufferPool pool = new BufferPool(small("128k", "1s", "paranoid"), new CountingRegistrar())) {
            acquireAndDrop(pool);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            int found = 0;
            while (found == 0 && System.nanoTime() < deadline) {
                System.gc();
                Thread.sleep(20);
                found = pool.checkLeaks();
            }
            assertEquals(1, found, "the dropped buffer was not detected");
            BufferPoolStats s = pool.stats();
            assertEquals(1, s.leaksDetected());
            assertEquals(0, s.inUseBuffers());
            assertEquals(0, s.inUseBytes());
            // Its memory came back: both 64k buffers of the single chunk can be held again.
            RegisteredBuffer a = pool.acquire(64 << 10);
            RegisteredBuffer b = pool.acquire(64 << 10);
            assertNotSame(a, b);
            a.release();
            b.release();
        }
    }

    private static void acquireAndDrop(BufferPool pool) {
        RegisteredBuffer lost = pool.acquire(64 << 10);
        lost.touch("test: dropped on purpose");
        lost.byteBuffer().putInt(0, 42);
    }

    @Test
    void shouldFailSecondReleaseWhenBufferWasAlreadyReleased() {
        try (BufferPool pool = new BufferPool(small("1m", "1s", "disabled"), new CountingRegistrar())) {
            RegisteredBuffer b = pool.acquire(100);
            b.retain();
            assertFalse(b.release());
            assertTrue(b.release());
            IllegalStateException e = assertThrows(IllegalStateException.class, b::release);
            assertTrue(e.getMessage().contains("double release"), e.getMessage());
            assertThrows(IllegalStateException.class, b::retain);
            assertEquals(0, pool.stats().inUseBuffers());
        }
    }

    @Test
    void shouldAddUpStatisticsWhenBuffersComeFromCacheSharedListAndNewChunks() {
        CountingRegistrar registrar = new CountingRegistrar();
        try (BufferPool pool = new BufferPool(small("1m", "1s", "disabled"), registrar)) {
            RegisteredBuffer first = pool.acquire(5000);       // miss: registers a chunk of 8k buffers
            assertEquals(8192, first.capacity());
            RegisteredBuffer second = pool.acquire(8192);      // shared hit from that chunk
            first.release();                                   // into this thread's cache
            RegisteredBuffer third = pool.acquire(6000);       // thread-cache hit
            assertSame(first, third);
            RegisteredBuffer large = pool.acquire(100_000);    // above the largest class: its own registration
            assertEquals(100_000, large.capacity());
            BufferPoolStats s = pool.stats();
            assertEquals(4, s.acquires());
            assertEquals(1, s.releases());
            assertEquals(2, s.hits());
            assertEquals(1, s.threadCacheHits());
            assertEquals(2, s.misses());
            assertEquals(2, s.registrations());
            assertEquals((128 << 10) + 100_000, s.registeredBytes());
            assertEquals(3, s.inUseBuffers());
            assertEquals(8192 + 8192 + 100_000, s.inUseBytes());
            assertEquals(registrar.liveBytes.get(), s.registeredBytes());
            large.release();                                   // deregistered at once
            assertEquals(128 << 10, pool.stats().registeredBytes());
            assertEquals(1, pool.stats().deregistrations());
            second.release();
            third.release();
            assertEquals(0, pool.stats().inUseBytes());
        }
        assertEquals(0, registrar.live.get());
    }

    @Test
    void shouldRegisterPreallocatedChunksWhenPoolStarts() {
        CountingRegistrar registrar = new CountingRegistrar();
        BufferPoolOptions o = options(Map.of("spark.shuffle.rdma.pool.preallocate", "64k:600,1m:32",
                "spark.shuffle.rdma.pool.chunkSize", "32m"));
        try (BufferPool pool = new BufferPool(o, registrar)) {
            BufferPoolStats s = pool.stats();
            assertEquals(3, s.registrations()); // 600 x 64k = 2 chunks, 32 x 1m = 1 chunk
            assertEquals(96L << 20, s.registeredBytes());
            RegisteredBuffer b = pool.acquire(1 << 20);
            assertEquals(0, pool.stats().misses());
            b.release();
        }
        assertEquals(0, registrar.live.get());
    }

    @Test
    void shouldFailAcquireWithCauseWhenRegistrationFails() {
        CountingRegistrar registrar = new CountingRegistrar();
        registrar.fail = true;
        try (BufferPool pool = new BufferPool(small("1m", "1s", "disabled"), registrar)) {
            BufferPoolException e = assertThrows(BufferPoolException.class, () -> pool.acquire(4096));
            assertTrue(e.getMessage().contains("device refused registration"), e.getMessage());
            assertTrue(e.memoryUnavailable(), "a refused registration is the host's memory trouble");
            assertEquals(0, pool.stats().registeredBytes());
            assertEquals(1, pool.stats().hostRefusals());
        }
    }

    @Test
    @Timeout(60)
    void shouldTakeBackIdleMemoryWhenTheHostRefusesMoreInsteadOfFailing() {
        CountingRegistrar registrar = new CountingRegistrar();
        registrar.limitBytes = 128 << 10; // one chunk, as a small ulimit -l would allow
        try (BufferPool pool = new BufferPool(small("1m", "1s", "disabled"), registrar)) {
            pool.acquire(4096).release(); // a 4k-class chunk, idle in this thread's cache
            RegisteredBuffer big = pool.acquire(32 << 10); // refused at first: the idle chunk makes room
            assertEquals(32 << 10, big.capacity());
            assertEquals(1, pool.stats().hostRefusals());
            assertEquals(128 << 10, pool.stats().registeredBytes());
            // Everything registered is in use: no wait can help a try, a waiting acquire gives up as the host's trouble.
            assertEquals(null, pool.tryAcquire(4096));
            BufferPoolException e = assertThrows(BufferPoolException.class, () -> pool.acquire(4096));
            assertTrue(e.memoryUnavailable(), e.getMessage());
            assertTrue(e.getMessage().contains("locked-memory limit"), e.getMessage());
            big.release();
            pool.acquire(4096).release(); // the 32k chunk, idle now, gives way again
            assertEquals(0, registrar.live.get() - 1);
        }
        assertEquals(0, registrar.live.get());
    }

    @Test
    @Timeout(60)
    void shouldFailFastWithoutAllocatingAgainWhileTheHostsRefusalStands() {
        CountingRegistrar registrar = new CountingRegistrar();
        registrar.limitBytes = 0;
        java.lang.management.BufferPoolMXBean direct = java.lang.management.ManagementFactory
                .getPlatformMXBeans(java.lang.management.BufferPoolMXBean.class).stream()
                .filter(b -> b.getName().equals("direct")).findFirst().orElseThrow();
        long before = direct.getMemoryUsed();
        try (BufferPool pool = new BufferPool(small("1m", "10s", "disabled"), registrar)) {
            for (int i = 0; i < 20; i++) {
                long t0 = System.nanoTime();
                BufferPoolException e = assertThrows(BufferPoolException.class, () -> pool.acquire(4096));
                assertTrue(e.memoryUnavailable(), e.getMessage());
                assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(5), "waited for memory that cannot come");
            }
            assertEquals(1, registrar.calls.get(), "asked the host again while its refusal stands");
            assertTrue(direct.getMemoryUsed() - before < 128 << 10, "refused memory kept: "
                    + (direct.getMemoryUsed() - before) + " bytes");
        }
    }

    @Test
    void shouldRefuseAcquireWhenClosedOrSizeIsNotPositive() {
        BufferPool pool = new BufferPool(small("1m", "1s", "disabled"), new CountingRegistrar());
        assertThrows(IllegalArgumentException.class, () -> pool.acquire(0));
        pool.close();
        pool.close();
        assertFalse(assertThrows(BufferPoolException.class, () -> pool.acquire(10)).memoryUnavailable());
    }

    @Test
    @Timeout(60)
    void shouldHandBuffersReleasedByAThreadThatNeverAcquiresToEveryoneInsteadOfRegisteringMore() throws Exception {
        CountingRegistrar registrar = new CountingRegistrar();
        try (BufferPool pool = new BufferPool(small("4m", "5s", "disabled"), registrar)) {
            RegisteredBuffer first = pool.acquire(64 << 10); // a chunk of two 64 KiB buffers
            CountDownLatch released = new CountDownLatch(1);
            CountDownLatch done = new CountDownLatch(1);
            Thread transport = new Thread(() -> { // like a completion thread returning a landed READ's buffer
                first.release();
                released.countDown();
                try {
                    done.await(); // stays alive: a live thread's cache is never reclaimed as an ended one's
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            transport.start();
            try {
                assertTrue(released.await(10, TimeUnit.SECONDS));
                RegisteredBuffer a = pool.acquire(64 << 10);
                RegisteredBuffer b = pool.acquire(64 << 10);
                assertEquals(1, pool.stats().misses(), "a new chunk was registered while a free buffer sat in "
                        + "the cache of a thread that never takes from it");
                a.release();
                b.release();
            } finally {
                done.countDown();
                transport.join();
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldTellTheCallerWhatAnAcquireTakesAndThatThePoolWasExhaustedAtItsCap() {
        try (BufferPool pool = new BufferPool(small("128k", "200ms", "disabled"), new CountingRegistrar())) {
            assertEquals(4 << 10, pool.bytesTaken(32));
            assertEquals(8 << 10, pool.bytesTaken((4 << 10) + 1));
            assertEquals(64 << 10, pool.bytesTaken(64 << 10));
            assertEquals((64 << 10) + 1, pool.bytesTaken((64 << 10) + 1)); // above the largest class: its own size
            assertThrows(IllegalArgumentException.class, () -> pool.bytesTaken(0));
            RegisteredBuffer a = pool.acquire(64 << 10);
            RegisteredBuffer b = pool.acquire(64 << 10);
            BufferPoolException e = assertThrows(BufferPoolException.class, () -> pool.acquire(64 << 10));
            assertTrue(e.exhausted() && !e.memoryUnavailable(), e.getMessage());
            a.release();
            b.release();
        }
    }
}
