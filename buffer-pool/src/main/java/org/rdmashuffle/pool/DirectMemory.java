package org.rdmashuffle.pool;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Frees direct and mapped buffers at once instead of when the garbage collector finds them: memory
 * that could not be registered, mappings of files that were deregistered.
 */
public final class DirectMemory {
    private static final Logger LOG = LoggerFactory.getLogger(DirectMemory.class);
    private static final Object UNSAFE;
    private static final Method INVOKE_CLEANER;

    static {
        Object unsafe = null;
        Method m = null;
        try {
            Class<?> c = Class.forName("sun.misc.Unsafe");
            Field f = c.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            unsafe = f.get(null);
            m = c.getMethod("invokeCleaner", ByteBuffer.class);
        } catch (ReflectiveOperationException | RuntimeException e) {
            LOG.info("freeing direct memory explicitly is unavailable ({}); it is left to the garbage collector",
                    e.toString());
        }
        UNSAFE = unsafe;
        INVOKE_CLEANER = m;
    }

    private DirectMemory() {
    }

    /**
     * Frees {@code buffer} (a direct or mapped buffer that is not a slice or duplicate); it must not be
     * touched afterwards. Heap buffers are left alone.
     */
    public static void free(ByteBuffer buffer) {
        if (INVOKE_CLEANER == null || !buffer.isDirect()) {
            return;
        }
        try {
            INVOKE_CLEANER.invoke(UNSAFE, buffer);
        } catch (ReflectiveOperationException | RuntimeException e) {
            LOG.warn("freeing a direct buffer failed; left to the garbage collector", e);
        }
    }
}
