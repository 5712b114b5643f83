package org.rdmashuffle.transport;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Memory for registered file ranges: maps (or copies) a range with its bounds checked, and unmaps at
 * once instead of waiting for the garbage collector. Shared by the providers.
 */
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

    /** How {@link #fileRange} provides a file's bytes. */
    public enum FileMemory {
        /** A read-only shared mapping. */
        READ_ONLY,
        /** A read-write shared mapping (for devices that pin pages for writing; never written). */
        READ_WRITE,
        /** A copy in a new direct buffer. */
        COPY
    }

    /**
     * {@code length} bytes of {@code file} from {@code offset}, as {@code how} says; release the result
     * with {@link #unmap}.
     *
     * @throws IllegalArgumentException when the range is empty, negative or beyond the end of the file
     */
    public static ByteBuffer fileRange(Path file, long offset, int length, FileMemory how) throws IOException {
        if (offset < 0 || length <= 0) {
            throw new IllegalArgumentException("bad file range: offset " + offset + ", length " + length);
        }
        try (FileChannel fc = how == FileMemory.READ_WRITE
                ? FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)
                : FileChannel.open(file, StandardOpenOption.READ)) {
            long size = fc.size();
            if (offset + length > size) {
                throw new IllegalArgumentException("range " + offset + "+" + length + " is beyond the end of "
                        + file + " (" + size + " bytes)");
            }
            if (how == FileMemory.COPY) {
                ByteBuffer copy = ByteBuffer.allocateDirect(length);
                while (copy.hasRemaining()) {
                    if (fc.read(copy, offset + copy.position()) < 0) {
                        throw new IOException(file + " ended while it was being copied");
                    }
                }
                return copy.clear();
            }
            return fc.map(how == FileMemory.READ_WRITE ? FileChannel.MapMode.READ_WRITE
                    : FileChannel.MapMode.READ_ONLY, offset, length);
        }
    }
}
