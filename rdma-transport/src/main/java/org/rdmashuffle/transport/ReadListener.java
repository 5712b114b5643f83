package org.rdmashuffle.transport;

/**
 * Receives one completion per posted READ, on the provider's completion thread (never the poster's).
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
