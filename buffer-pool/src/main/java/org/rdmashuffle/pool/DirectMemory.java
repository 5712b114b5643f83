package org.rdmashuffle.pool;

import java.lang.ref.Cleaner;
import java.lang.reflect.Constructor;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Allocates direct memory without zeroing it, and frees direct and mapped buffers at once instead of
 * when the garbage collector finds them: memory that could not be registered, mappings of files that
 * were deregistered.
 */
public final class DirectMemory {
    private static final Logger LOG = LoggerFactory.getLogger(DirectMemory.class);
    private static final Object UNSAFE;
    private static final Method INVOKE_CLEANER;
    /** The parts of {@link #allocateUnzeroed}; all null where the JDK does not let us use them. */
    private static final Method ALLOCATE_MEMORY;
    private static final Method FREE_MEMORY;
    private static final Method RESERVE;
    private static final Method UNRESERVE;
    private static final Constructor<?> WRAP;
    private static final Field ADDRESS;
    private static final Cleaner CLEANER;
    /** Memory {@link #allocateUnzeroed} handed out and not freed yet, by address. */
    private static final Map<Long, Held> UNZEROED = new ConcurrentHashMap<>();
    /** Set once allocateMemory refused (a JDK that denies sun.misc.Unsafe's memory access): allocateDirect from then on. */
    private static volatile boolean refused;

    /** A buffer {@link #allocateUnzeroed} handed out (weakly, so its Cleaner still runs) and its release. */
    private record Held(java.lang.ref.WeakReference<ByteBuffer> buffer, Cleaner.Cleanable release) {
    }

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
        Method allocate = null;
        Method freeMemory = null;
        Method reserve = null;
        Method unreserve = null;
        Constructor<?> wrap = null;
        Field address = null;
        if (unsafe != null) {
            try {
                allocate = unsafe.getClass().getMethod("allocateMemory", long.class);
                freeMemory = unsafe.getClass().getMethod("freeMemory", long.class);
                // The JDK's own accounting of direct memory (-XX:MaxDirectMemorySize, the "direct"
                // BufferPoolMXBean), as ByteBuffer.allocateDirect does it; needs java.nio opened to us,
                // as Spark opens it for its executors.
                Class<?> bits = Class.forName("java.nio.Bits");
                reserve = bits.getDeclaredMethod("reserveMemory", long.class, long.class);
                unreserve = bits.getDeclaredMethod("unreserveMemory", long.class, long.class);
                Class<?> dbb = Class.forName("java.nio.DirectByteBuffer");
                for (Class<?> capType : new Class<?>[] {long.class, int.class}) { // JDK 21+, JDK 17
                    try {
                        wrap = dbb.getDeclaredConstructor(long.class, capType);
                        break;
                    } catch (NoSuchMethodException e) {
                        // the other signature
                    }
                }
                if (wrap == null) {
                    throw new NoSuchMethodException("DirectByteBuffer(long, long|int)");
                }
                address = Buffer.class.getDeclaredField("address");
                reserve.setAccessible(true);
                unreserve.setAccessible(true);
                wrap.setAccessible(true);
                address.setAccessible(true);
            } catch (ReflectiveOperationException | RuntimeException e) {
                LOG.debug("direct memory is allocated zeroed (ByteBuffer.allocateDirect): {}", e.toString());
                allocate = null;
                wrap = null;
            }
        }
        boolean usable = allocate != null && wrap != null;
        ALLOCATE_MEMORY = usable ? allocate : null;
        FREE_MEMORY = usable ? freeMemory : null;
        RESERVE = usable ? reserve : null;
        UNRESERVE = usable ? unreserve : null;
        WRAP = usable ? wrap : null;
        ADDRESS = usable ? address : null;
        CLEANER = usable ? Cleaner.create() : null;
    }

    private DirectMemory() {
    }

    /** Whether {@link #allocateUnzeroed} skips the zeroing on this JVM (else it is {@code allocateDirect}). */
    public static boolean unzeroedAvailable() {
        return WRAP != null;
    }

    /**
     * A direct buffer of {@code bytes} whose contents are whatever the memory held: as
     * {@link ByteBuffer#allocateDirect} (counted against {@code -XX:MaxDirectMemorySize} and in the
     * "direct" buffer pool's statistics, freed when the buffer becomes unreachable or by
     * {@link #free}), without writing every byte first. {@code allocateDirect} writes zeros over the
     * whole buffer on the allocating thread, faulting in every page of it; memory left untouched here
     * is never faulted in, and receive buffers are written before they are read. Falls back to
     * {@code allocateDirect} where the JDK's internals are closed to this class.
     *
     * @throws OutOfMemoryError past {@code -XX:MaxDirectMemorySize}, or when the system has no memory
     */
    public static ByteBuffer allocateUnzeroed(int bytes) {
        if (WRAP == null || bytes == 0 || refused) {
            return ByteBuffer.allocateDirect(bytes);
        }
        try {
            RESERVE.invoke(null, (long) bytes, (long) bytes);
        } catch (InvocationTargetException e) {
            throw rethrown(e); // OutOfMemoryError("Cannot reserve ... bytes of direct buffer memory ...")
        } catch (IllegalAccessException e) {
            return ByteBuffer.allocateDirect(bytes);
        }
        long address;
        try {
            address = (long) ALLOCATE_MEMORY.invoke(UNSAFE, (long) bytes);
        } catch (InvocationTargetException | IllegalAccessException | RuntimeException e) {
            unreserve(bytes);
            if (e instanceof InvocationTargetException ite && ite.getCause() instanceof Error error) {
                throw error; // OutOfMemoryError: the system has no memory
            }
            // e.g. UnsupportedOperationException under --sun-misc-unsafe-memory-access=deny (JDK 24+)
            refused = true;
            LOG.debug("direct memory is allocated zeroed from now on: {}", e.toString());
            return ByteBuffer.allocateDirect(bytes);
        }
        ByteBuffer buffer;
        try {
            buffer = (ByteBuffer) (WRAP.getParameterTypes()[1] == long.class
                    ? WRAP.newInstance(address, (long) bytes) : WRAP.newInstance(address, bytes));
        } catch (ReflectiveOperationException | RuntimeException e) {
            freeRaw(address, bytes);
            return ByteBuffer.allocateDirect(bytes);
        }
        // Slices and duplicates keep the buffer reachable (their attachment), as they do for allocateDirect.
        UNZEROED.put(address, new Held(new java.lang.ref.WeakReference<>(buffer),
                CLEANER.register(buffer, new Release(address, bytes))));
        return buffer;
    }

    /** Frees what {@link #allocateUnzeroed} allocated: by {@link #free} or when its buffer became unreachable. */
    private record Release(long address, int bytes) implements Runnable {
        @Override
        public void run() {
            UNZEROED.remove(address);
            freeRaw(address, bytes);
        }
    }

    private static void freeRaw(long address, int bytes) {
        try {
            FREE_MEMORY.invoke(UNSAFE, address);
        } catch (ReflectiveOperationException | RuntimeException e) {
            LOG.warn("freeing {} bytes of direct memory failed", bytes, e);
            return; // still counted: better a reported leak than a count that lies
        }
        unreserve(bytes);
    }

    private static void unreserve(int bytes) {
        try {
            UNRESERVE.invoke(null, (long) bytes, (long) bytes);
        } catch (ReflectiveOperationException | RuntimeException e) {
            LOG.warn("returning {} bytes to the JDK's direct memory count failed", bytes, e);
        }
    }

    private static RuntimeException rethrown(InvocationTargetException e) {
        Throwable cause = e.getCause();
        if (cause instanceof Error error) {
            throw error;
        }
        if (cause instanceof RuntimeException r) {
            return r;
        }
        return new IllegalStateException(cause);
    }

    /**
     * Frees {@code buffer} (a direct or mapped buffer that is not a slice or duplicate); it must not be
     * touched afterwards. Heap buffers are left alone.
     */
    public static void free(ByteBuffer buffer) {
        if (!buffer.isDirect()) {
            return;
        }
        if (ADDRESS != null && !UNZEROED.isEmpty()) {
            Held h;
            try {
                h = UNZEROED.get(ADDRESS.getLong(buffer));
            } catch (IllegalAccessException | RuntimeException e) {
                h = null;
            }
            if (h != null) {
                if (h.buffer().get() != buffer) {
                    // a duplicate or a slice at its start: freeing it would free memory the buffer still uses
                    LOG.warn("not freeing a duplicate or slice of a direct buffer; only the buffer itself is freed");
                    return;
                }
                h.release().clean(); // runs Release once, whoever comes first
                return;
            }
        }
        if (INVOKE_CLEANER == null) {
            return;
        }
        try {
            INVOKE_CLEANER.invoke(UNSAFE, buffer);
        } catch (ReflectiveOperationException | RuntimeException e) {
            LOG.warn("freeing a direct buffer failed; left to the garbage collector", e);
        }
    }
}
