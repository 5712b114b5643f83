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
     * @throws IOException when the memory cannot be registered; the pool then fails the acquire
     */
    Registration register(ByteBuffer memory) throws IOException;

    /** A registrar that registers nothing: plain pooled direct memory (tests, the local path). */
    Registrar NONE = memory -> () -> { };
}
