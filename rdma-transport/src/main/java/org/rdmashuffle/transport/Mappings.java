package org.rdmashuffle.transport;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import org.rdmashuffle.pool.DirectMemory;

/**
 * Memory for registered file ranges: maps (or copies) a range with its bounds checked, and unmaps at
 * once instead of waiting for the garbage collector. Shared by the providers.
 */
public final class Mappings {
    private Mappings() {
    }

    /** Releases {@code mapped}; it must not be touched afterwards. */
    public static void unmap(ByteBuffer mapped) {
        DirectMemory.free(mapped);
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
        checkRange(offset, length);
        try (FileChannel fc = how == FileMemory.READ_WRITE
                ? FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)
                : FileChannel.open(file, StandardOpenOption.READ)) {
            return fileRange(fc, file.toString(), offset, length, how);
        }
    }

    /**
     * As {@link #fileRange(Path, long, int, FileMemory)}, from a file already open: the bytes of exactly the file
     * {@code fc} is open on, whatever its path names by now. {@code fc} must be open for reading ({@link
     * FileMemory#READ_WRITE}: also for writing); it stays open (a mapping does not need it). {@code name} is for
     * messages only.
     */
    public static ByteBuffer fileRange(FileChannel fc, String name, long offset, int length, FileMemory how)
            throws IOException {
        checkRange(offset, length);
        long size = fc.size();
        if (offset + length > size) {
            throw new IllegalArgumentException("range " + offset + "+" + length + " is beyond the end of "
                    + name + " (" + size + " bytes)");
        }
        if (how == FileMemory.COPY) {
            ByteBuffer copy = ByteBuffer.allocateDirect(length);
            while (copy.hasRemaining()) {
                if (fc.read(copy, offset + copy.position()) < 0) {
                    throw new IOException(name + " ended while it was being copied");
                }
            }
            return copy.clear();
        }
        return fc.map(how == FileMemory.READ_WRITE ? FileChannel.MapMode.READ_WRITE
                : FileChannel.MapMode.READ_ONLY, offset, length);
    }

    private static void checkRange(long offset, int length) {
        if (offset < 0 || length <= 0) {
            throw new IllegalArgumentException("bad file range: offset " + offset + ", length " + length);
        }
    }
}
