package org.rdmashuffle.pool;

/** An array stack of the free buffers of one size class, guarded by the pool lock. */
final class FreeStack {
    private RegisteredBuffer[] items = new RegisteredBuffer[64];
    private int size;

    void push(RegisteredBuffer b) {
        if (size == items.length) {
            RegisteredBuffer[] bigger = new RegisteredBuffer[size * 2];
            System.arraycopy(items, 0, bigger, 0, size);
            items = bigger;
        }
        items[size++] = b;
    }

    RegisteredBuffer pop() {
        if (size == 0) {
            return null;
        }
        RegisteredBuffer b = items[--size];
        items[size] = null;
        return b;
    }

    /** Drops the buffers of {@code c}, which is about to be deregistered. */
    void removeChunk(Chunk c) {
        int w = 0;
        for (int r = 0; r < size; r++) {
            if (items[r].chunk != c) {
                items[w++] = items[r];
            }
        }
        for (int i = w; i < size; i++) {
            items[i] = null;
        }
        size = w;
    }

    void clear() {
        for (int i = 0; i < size; i++) {
            items[i] = null;
        }
        size = 0;
    }
}
