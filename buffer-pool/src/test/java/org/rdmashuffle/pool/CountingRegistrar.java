package org.rdmashuffle.pool;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/** A registrar that counts live registrations and bytes, and can be told to fail. */
final class CountingRegistrar implements Registrar {
    final AtomicInteger live = new AtomicInteger();
    final AtomicLong liveBytes = new AtomicLong();
    final AtomicInteger doubleCloses = new AtomicInteger();
    volatile boolean fail;

    @Override
    public Registration register(ByteBuffer memory) throws IOException {
        if (fail) {
            throw new IOException("device refused registration");
        }
        live.incrementAndGet();
        liveBytes.addAndGet(memory.capacity());
        AtomicInteger closes = new AtomicInteger();
        return () -> {
            if (closes.incrementAndGet() == 1) {
                live.decrementAndGet();
                liveBytes.addAndGet(-memory.capacity());
            } else {
                doubleCloses.incrementAndGet();
            }
        };
    }
}
