package org.rdmashuffle.transport;

/**
 * Receives one completion per READ accepted by {@link RdmaChannel#post}, never from inside that call: on a
 * thread of the provider (its completion or requester thread, or its worker for READs it completes without
 * posting them), or — when a channel or node fails or closes — on the thread that fails or closes it, which may
 * be the caller of {@code close()}. So it may run on a thread that also posts, but never nested in a post.
 * Must return quickly and must not block; it may post further READs.
 */
@FunctionalInterface
public interface ReadListener {
    /**
     * @param requestId the id given to {@link ReadBatch#add}
     * @param status {@link ReadStatus#SUCCESS} or an error code
     * @param lengthBytes bytes placed in the destination (0 on error)
     */
    void onReadComplete(long requestId, int status, int lengthBytes);
}
