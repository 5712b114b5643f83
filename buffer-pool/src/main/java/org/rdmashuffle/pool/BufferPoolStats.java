package org.rdmashuffle.pool;

/**
 * A snapshot of a pool's counters. They add up: {@code acquires == hits + misses};
 * {@code inUseBuffers == acquires - releases - leaksDetected}; {@code registeredBytes} is what the
 * registrations minus the deregistrations cover.
 *
 * @param registeredBytes memory registered now (chunks and dedicated large buffers)
 * @param inUseBytes capacity of buffers acquired and not yet released
 * @param inUseBuffers buffers acquired and not yet released
 * @param acquires successful acquires
 * @param releases buffers returned (reference count reached zero)
 * @param hits acquires served from memory already registered (thread cache or shared free list)
 * @param threadCacheHits the part of {@code hits} served by the calling thread's cache
 * @param misses acquires that had to register new memory
 * @param registrations registrar calls that succeeded
 * @param deregistrations registrations closed
 * @param waits acquires that had to wait at the cap
 * @param timeouts acquires that failed at the cap after waiting
 * @param leaksDetected buffers found dropped without release
 * @param hostRefusals times the host refused the pool more memory (allocating or registering a chunk
 *     failed); each makes what is registered the pool's cap for a while
 */
public record BufferPoolStats(long registeredBytes, long inUseBytes, long inUseBuffers, long acquires, long releases,
                              long hits, long threadCacheHits, long misses, long registrations, long deregistrations,
                              long waits, long timeouts, long leaksDetected, long hostRefusals) implements java.io.Serializable {
    private static final long serialVersionUID = 1L;

}
