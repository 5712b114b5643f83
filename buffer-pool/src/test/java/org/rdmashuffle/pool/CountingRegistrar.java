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
    /** Registered bytes past which it refuses, as a locked-memory limit does. */
    volatile long limitBytes = Long.MAX_VALUE;
    final AtomicInteger calls = new AtomicInteger();

    @Override
    public Registration register(ByteBuffer memory) throws IOException {
        calls.incrementAndGet();
        if (fail) {
            throw new IOException("device refused registration");
        }
        if (liveBytes.get() + memory.capacity() > limitBytes) {
            throw new IOException("cannot pin " + memory.capacity() + " bytes: locked-memory limit reached");
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
