package org.rdmashuffle.transport;

import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;

/**
 * A connection to one peer node. Thread-safe: many threads may post on one channel.
 *
 * <p>Every READ accepted by {@link #post} completes exactly once through its listener, with
 * success or an error status, on the provider's completion thread; when the channel fails or closes,
 * all outstanding READs complete with an error. None is left hanging: a READ outstanding longer than
 * the request timeout fails the channel.
 */
public interface RdmaChannel extends AutoCloseable {
    NodeAddress peer();

    /**
     * Posts every READ in {@code batch}; the batch may be reused when this returns. Never waits: READs past
     * the depth of the channel's queue wait in the channel (callers bound what they post, e.g. the fetcher's
     * budget of READs per peer). A READ the channel accepted but cannot carry out (it closed meanwhile)
     * completes with an error through its listener, off this call.
     *
     * @throws TransportException when the channel is already closed or failed: nothing was posted and no
     *     completion will come. Any other exception may come after some READs were accepted, whose
     *     completions will still come.
     */
    void post(ReadBatch batch, ReadListener listener) throws TransportException;

    /**
     * Sends a small two-sided control message; the future completes with the peer's reply, or
     * exceptionally with a {@link TransportException}.
     */
    CompletableFuture<ByteBuffer> call(ByteBuffer request);

    /** Whether the channel can still take posts. */
    boolean isOpen();

    /** Fails every outstanding request with {@link ReadStatus#CHANNEL_CLOSED} and closes. Idempotent. */
    @Override
    void close();
}
