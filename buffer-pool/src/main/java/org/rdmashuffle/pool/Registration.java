package org.rdmashuffle.pool;

/**
 * What a {@link Registrar} returns for a chunk of memory it registered. The pool holds it while the
 * chunk lives and closes it (deregisters) exactly once when the chunk is released. The transport that
 * made it may give it any further meaning (keys, addresses); the pool knows none.
 */
public interface Registration extends AutoCloseable {
    /** Deregisters the memory. Called once by the pool; must not throw for a healthy registration. */
    @Override
    void close();
}
