package org.rdmashuffle.pool;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A {@link CountingRegistrar} whose next deregistration, once gated, announces itself and waits for
 * the test to let it proceed: it holds a thread inside the pool's reclaiming of memory.
 */
final class GatedRegistrar implements Registrar {
    final CountingRegistrar counting = new CountingRegistrar();
    final CountDownLatch closing = new CountDownLatch(1);
    final CountDownLatch proceed = new CountDownLatch(1);
    private volatile boolean gated;

    void gateNextClose() {
        gated = true;
    }

    @Override
    public Registration register(ByteBuffer memory) throws IOException {
        Registration r = counting.register(memory);
        return () -> {
            if (gated) {
                gated = false;
                closing.countDown();
                try {
                    if (!proceed.await(120, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("the test never let the deregistration proceed");
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            r.close();
        };
    }
}
