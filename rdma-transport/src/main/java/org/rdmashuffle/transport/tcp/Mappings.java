package org.rdmashuffle.transport.tcp;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Unmaps a mapped file at once instead of waiting for the garbage collector. */
public final class Mappings {
    private static final Logger LOG = LoggerFactory.getLogger(Mappings.class);
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
            LOG.info("explicit unmapping unavailable ({}); mappings are released by the garbage collector", e.toString());
        }
        UNSAFE = unsafe;
        INVOKE_CLEANER = m;
    }

    private Mappings() {
    }

    /** Releases {@code mapped}; it must not be touched afterwards. */
    public static void unmap(ByteBuffer mapped) {
        if (INVOKE_CLEANER == null || !mapped.isDirect()) {
            return;
        }
        try {
            INVOKE_CLEANER.invoke(UNSAFE, mapped);
        } catch (ReflectiveOperationException | RuntimeException e) {
            LOG.warn("unmapping failed; left to the garbage collector", e);
        }
    }
}
