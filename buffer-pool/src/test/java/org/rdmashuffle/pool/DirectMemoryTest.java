package org.rdmashuffle.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

class DirectMemoryTest {

    private static BufferPoolMXBean direct() {
        for (BufferPoolMXBean b : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
            if (b.getName().equals("direct")) {
                return b;
            }
        }
        throw new AssertionError("no direct buffer pool bean");
    }

    @Test
    void shouldCountUnzeroedMemoryAsDirectMemoryUntilItIsFreed() {
        // The build opens java.nio to the tests, as Spark opens it to its executors.
        assertTrue(DirectMemory.unzeroedAvailable(), "allocation without zeroing is unavailable on this JDK");
        BufferPoolMXBean bean = direct();
        long countBefore = bean.getCount();
        long bytesBefore = bean.getTotalCapacity();
        ByteBuffer b = DirectMemory.allocateUnzeroed(3 << 20);
        assertTrue(b.isDirect());
        assertEquals(3 << 20, b.capacity());
        assertEquals(countBefore + 1, bean.getCount());
        assertEquals(bytesBefore + (3 << 20), bean.getTotalCapacity());
        b.putLong(0, 0x0123456789abcdefL).putLong(b.capacity() - 8, 42L);
        ByteBuffer slice = b.duplicate().position(1 << 20).limit(2 << 20).slice();
        slice.putInt(0, 7);
        assertEquals(7, b.getInt(1 << 20));
        assertEquals(0x0123456789abcdefL, b.getLong(0));
        assertEquals(42L, b.getLong(b.capacity() - 8));

        DirectMemory.free(b);
        assertEquals(countBefore, bean.getCount());
        assertEquals(bytesBefore, bean.getTotalCapacity());
        DirectMemory.free(b); // a second free finds nothing to free
        assertEquals(bytesBefore, bean.getTotalCapacity());
    }

    @Test
    @Timeout(120)
    void shouldReturnUnzeroedMemoryWhenItsBufferBecomesUnreachable() throws InterruptedException {
        BufferPoolMXBean bean = direct();
        long before = bean.getTotalCapacity();
        ByteBuffer b = DirectMemory.allocateUnzeroed(1 << 20);
        assertNotNull(b);
        assertEquals(before + (1 << 20), bean.getTotalCapacity());
        b = null;
        while (bean.getTotalCapacity() > before) { // the @Timeout fails the test if it is never returned
            System.gc();
            Thread.sleep(20);
        }
        assertEquals(before, bean.getTotalCapacity());
    }

    @Test
    @Timeout(120)
    void shouldRefuseUnzeroedMemoryPastTheDirectMemoryLimitAsAllocateDirectDoes() {
        // The tests run with -Xmx2g and so at most 2 GiB of direct memory: some of these 512 MiB
        // requests (never touched, so never faulted in) must be refused.
        List<ByteBuffer> held = new ArrayList<>();
        OutOfMemoryError refused = null;
        try {
            for (int i = 0; i < 8 && refused == null; i++) {
                try {
                    held.add(DirectMemory.allocateUnzeroed(512 << 20));
                } catch (OutOfMemoryError e) {
                    refused = e;
                }
            }
        } finally {
            held.forEach(DirectMemory::free);
        }
        assertNotNull(refused, "4 GiB of direct memory was handed out under a 2 GiB limit");
        assertTrue(String.valueOf(refused.getMessage()).contains("direct buffer memory"), refused.toString());
    }

    @Test
    void shouldNotFreeUnzeroedMemoryThroughADuplicateOrASliceAtItsStart() {
        assertTrue(DirectMemory.unzeroedAvailable(), "allocation without zeroing is unavailable on this JDK");
        BufferPoolMXBean bean = direct();
        long before = bean.getTotalCapacity();
        ByteBuffer b = DirectMemory.allocateUnzeroed(1 << 20);
        // Same address as b: freeing either would leave b pointing at freed memory (a crash or another
        // allocation's bytes on its next use), as invokeCleaner refuses to do for allocateDirect's buffers.
        DirectMemory.free(b.duplicate());
        DirectMemory.free(b.slice(0, 4096));
        assertEquals(before + (1 << 20), bean.getTotalCapacity(), "a duplicate or slice freed the buffer's memory");
        b.putLong(0, 42L);
        assertEquals(42L, b.getLong(0));
        DirectMemory.free(b);
        assertEquals(before, bean.getTotalCapacity());
    }
}
