package org.rdmashuffle.shuffle;

import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.function.Function;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;

/**
 * A streamed block's bytes (larger than the pool's largest buffer, READ window by window as they are
 * decoded), turning a window that failed mid-stream into the exception {@code onFailure} makes of it (the
 * FetchFailedException naming the block). On the task thread. Closing it closes nothing: the block's windows
 * are given back when the block is closed.
 */
final class StreamGuard extends FilterInputStream {
    private final Function<BlockFetcher.StreamFailed, RuntimeException> onFailure;

    StreamGuard(InputStream raw, Function<BlockFetcher.StreamFailed, RuntimeException> onFailure) {
        super(raw);
        this.onFailure = onFailure;
    }

    @Override
    public int read() throws IOException {
        try {
            return in.read();
        } catch (BlockFetcher.StreamFailed e) {
            throw onFailure.apply(e);
        }
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
        try {
            return in.read(b, off, len);
        } catch (BlockFetcher.StreamFailed e) {
            throw onFailure.apply(e);
        }
    }

    @Override
    public long skip(long n) throws IOException {
        try {
            return in.skip(n);
        } catch (BlockFetcher.StreamFailed e) {
            throw onFailure.apply(e);
        }
    }

    @Override
    public void close() {
        // the block's windows are given back when the block is closed
    }
}
