package org.rdmashuffle.pool;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * Registers memory on behalf of the pool; supplied by the transport. The pool calls it once per chunk
 * (never per buffer) and off the hot path, possibly from any thread, but never concurrently for the
 * same chunk.
 */
@FunctionalInterface
public interface Registrar {
    /**
     * Registers all of {@code memory} (a direct buffer, position 0, limit = capacity).
     *
     * @throws IOException when the host or the device refuses to register the memory (locked-memory
     *     or mapping limits, a device's limits): the pool then treats what it has registered as its cap
     *     for a while, and fails an acquire it cannot serve as {@link BufferPoolException#memoryUnavailable}
     * @throws RuntimeException for anything else (e.g. the transport is closed): the acquire fails
     */
    Registration register(ByteBuffer memory) throws IOException;

    /** A registrar that registers nothing: plain pooled direct memory (tests, the local path). */
    Registrar NONE = memory -> () -> { };
}
