package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.ref.WeakReference;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.pool.RegisteredBuffer;
import org.rdmashuffle.pool.Registrar;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.RegionAccess;

/**
 * A region whose deregistration failed may still be registered with the NIC, which can then write into
 * it (a READ sink) or serve it (a map output): its memory must stay mapped and reachable for good, counted
 * in the node's {@code regionsLeaked}, and the node fails (its executor goes to the engine's own path).
 * Over {@link EmulatedVerbs} with {@link EmulatedVerbs#deregisterFails}.
 */
class VerbsDeregistrationFailureTest {
    private static final RdmaShuffleConf CONF = EmulatedPeers.conf(Map.of());

    @TempDir
    Path dir;

    @Test
    @Timeout(60)
    void shouldKeepTheFileMappedAndFailTheNodeWhenDeregisteringAMapOutputFails() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        Path file = Files.write(dir.resolve("shuffle_0_7_0.data"), new byte[64 * 1024]).toRealPath();
        try (VerbsNode node = EmulatedPeers.node(device, CONF, "127.0.0.1", null)) {
            MemoryRegion region = node.registerFile(file, 0, 64 * 1024);
            assertTrue(mapped(file), "the map output is mapped while registered");
            long kept = node.stats().regionsLeaked(); // counted for the process: other tests' regions too
            device.deregisterFails = true;

            region.close();

            assertEquals(1, device.deregFailures.get(), "the deregistration was tried once");
            assertTrue(mapped(file), "a map output whose deregistration failed was unmapped while the NIC may "
                    + "still serve it");
            assertEquals(kept + 1, node.stats().regionsLeaked(), "the kept region is not counted");
            assertNotNull(node.failure(), "the node whose deregistration failed does not report itself failed");
            assertTrue(node.failure().getMessage().contains("deregist"), node.failure().getMessage());
            ByteBuffer more = ByteBuffer.allocateDirect(4096);
            assertThrows(IOException.class, () -> node.register(more, RegionAccess.REMOTE_READ),
                    "a failed node registers nothing more");
        }
        assertTrue(mapped(file), "closing the node unmapped the kept region");
    }

    @Test
    @Timeout(60)
    void shouldKeepAPooledChunkReachableWhenItsDeregistrationFails() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        List<WeakReference<ByteBuffer>> chunks = new CopyOnWriteArrayList<>();
        try (VerbsNode node = EmulatedPeers.node(device, CONF, "127.0.0.1", null)) {
            Registrar sinks = node.sinkRegistrar();
            Registrar watched = memory -> {
                chunks.add(new WeakReference<>(memory));
                return sinks.register(memory);
            };
            long kept = node.stats().regionsLeaked();
            BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), watched);
            RegisteredBuffer b = pool.acquire(4096);
            b.byteBuffer().putInt(0, 0x5EED);
            b.release();
            b = null;
            assertEquals(1, chunks.size(), "one chunk registered");
            device.deregisterFails = true;

            pool.close();
            pool = null;
            collectGarbage();

            assertEquals(1, device.deregFailures.get(), "the chunk's deregistration was tried once");
            ByteBuffer chunk = chunks.get(0).get();
            assertNotNull(chunk, "the memory of a chunk whose deregistration failed was left to the garbage "
                    + "collector while the NIC may still write into it");
            assertEquals(0x5EED, chunk.getInt(0), "the kept chunk's bytes");
            assertEquals(kept + 1, node.stats().regionsLeaked(), "the kept chunk is not counted");
            assertNotNull(node.failure(), "the node whose deregistration failed does not report itself failed");
        }
    }

    @Test
    @Timeout(60)
    void shouldCountEveryKeptRegionForTheProcessWhenSeveralDeregistrationsFail() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        try (VerbsNode node = EmulatedPeers.node(device, CONF, "127.0.0.1", null)) {
            MemoryRegion a = node.register(ByteBuffer.allocateDirect(4096), RegionAccess.READ_SINK);
            MemoryRegion b = node.register(ByteBuffer.allocateDirect(4096), RegionAccess.REMOTE_READ);
            MemoryRegion c = node.register(ByteBuffer.allocateDirect(4096), RegionAccess.REMOTE_READ);
            long kept = node.stats().regionsLeaked();
            c.close();
            device.deregisterFails = true;
            a.close();
            b.close();
            a.close(); // idempotent: not tried again, not counted again
            assertEquals(2, device.deregFailures.get());
            assertEquals(kept + 2, node.stats().regionsLeaked());
            assertEquals(0, node.stats().registeredRegions(), "kept regions are not registered regions any more");
            try (VerbsNode next = EmulatedPeers.node(device, CONF, "127.0.0.1", null)) {
                assertEquals(kept + 2, next.stats().regionsLeaked(), "a node started after the failed one (an "
                        + "executor's replacement node) does not show the memory the process still holds");
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldUnmapAndStayHealthyWhenDeregistrationSucceeds() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        Path file = Files.write(dir.resolve("shuffle_0_8_0.data"), new byte[64 * 1024]).toRealPath();
        try (VerbsNode node = EmulatedPeers.node(device, CONF, "127.0.0.1", null)) {
            MemoryRegion region = node.registerFile(file, 0, 64 * 1024);
            long kept = node.stats().regionsLeaked();
            region.close();
            assertTrue(!mapped(file), "a deregistered map output stays mapped");
            assertEquals(kept, node.stats().regionsLeaked());
            assertNull(node.failure());
        }
    }

    /** Whether this process maps {@code file} now (/proc/self/maps names every mapped file). */
    private static boolean mapped(Path file) throws IOException {
        String name = file.toString();
        for (String line : Files.readAllLines(Path.of("/proc/self/maps"))) {
            if (line.endsWith(" " + name)) {
                return true;
            }
        }
        return false;
    }

    /** Runs full collections until an object nothing refers to is collected. */
    private static void collectGarbage() throws InterruptedException {
        WeakReference<Object> sentinel = new WeakReference<>(new Object());
        for (int i = 0; i < 200 && sentinel.get() != null; i++) {
            System.gc();
            Thread.sleep(10);
        }
        assertNull(sentinel.get(), "no garbage collection ran");
    }
}
