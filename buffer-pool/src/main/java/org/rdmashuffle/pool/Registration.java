package org.rdmashuffle.pool;

/**
 * What a {@link Registrar} returns for a chunk of memory it registered. The pool holds it while the
 * chunk lives and closes it (deregisters) exactly once when the chunk is released. The transport that
 * made it may give it any further meaning (keys, addresses); the pool knows none.
 *
 * <p>After {@link #close} the pool only drops its reference to the chunk's memory: it never frees,
 * unmaps or reuses memory it has deregistered. A registration whose deregistration failed (the device may
 * still write into the memory) must therefore keep the memory reachable itself, for good; the verbs
 * provider does, and fails its node.
 */
public interface Registration extends AutoCloseable {
    /**
     * Deregisters the memory. Called once by the pool; must not throw for a healthy registration. When
     * deregistering fails, the registration keeps the memory (see above) rather than throw.
     */
    @Override
    void close();
}
