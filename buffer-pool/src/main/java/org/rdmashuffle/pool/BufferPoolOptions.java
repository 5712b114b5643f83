package org.rdmashuffle.pool;

import org.rdmashuffle.conf.PreallocationSpec;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.conf.RdmaShuffleConf.LeakDetection;

/**
 * The pool's settings, taken from {@link RdmaShuffleConf} (where they are declared and validated).
 *
 * @param minBufferBytes smallest size class, a power of two
 * @param maxBufferBytes largest size class, a power of two
 * @param chunkBytes memory registered at once, a power of two of at least {@code maxBufferBytes}
 * @param maxRegisteredBytes cap on registered memory
 * @param acquireTimeoutMs how long an acquire waits at the cap
 * @param threadCacheBuffers buffers a thread caches per size class
 * @param preallocate buffers registered at start
 * @param leakDetection tracking of dropped buffers
 */
public record BufferPoolOptions(int minBufferBytes, int maxBufferBytes, int chunkBytes, long maxRegisteredBytes,
                                long acquireTimeoutMs, int threadCacheBuffers, PreallocationSpec preallocate,
                                LeakDetection leakDetection) {

    public static BufferPoolOptions from(RdmaShuffleConf conf) {
        return new BufferPoolOptions(conf.poolMinBufferSizeBytes(), conf.poolMaxBufferSizeBytes(),
                conf.poolChunkSizeBytes(), conf.poolMaxRegisteredBytes(), conf.poolAcquireTimeoutMs(),
                conf.poolThreadCacheBuffers(), conf.poolPreallocate(), conf.poolLeakDetection());
    }
}
