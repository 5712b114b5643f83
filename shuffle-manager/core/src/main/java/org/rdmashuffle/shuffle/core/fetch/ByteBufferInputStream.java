package org.rdmashuffle.shuffle.core.fetch;

import java.io.InputStream;
import java.nio.ByteBuffer;

/** Reads a fetched block's bytes (a direct buffer view) as a stream, without copying them first. */
public final class ByteBufferInputStream extends InputStream {
    private final ByteBuffer buffer;

    public ByteBufferInputStream(ByteBuffer buffer) {
        this.buffer = buffer;
    }

    @Override
    public int read() {
        return buffer.hasRemaining() ? buffer.get() & 0xFF : -1;
    }

    @Override
    public int read(byte[] b, int off, int len) {
        if (len == 0) {
            return 0;
        }
        if (!buffer.hasRemaining()) {
            return -1;
        }
        int n = Math.min(len, buffer.remaining());
        buffer.get(b, off, n);
        return n;
    }

    @Override
    public long skip(long n) {
        int k = (int) Math.max(0, Math.min(n, buffer.remaining()));
        buffer.position(buffer.position() + k);
        return k;
    }

    @Override
    public int available() {
        return buffer.remaining();
    }
}
