package org.rdmashuffle.shuffle;

/** A block could not be fetched; {@link #request()} names which, so the caller can report the right map. */
public final class FetchFailure extends Exception {
    private static final long serialVersionUID = 1L;
    private final transient BlockFetcher.Request request;

    public FetchFailure(BlockFetcher.Request request, String message, Throwable cause) {
        super(message, cause);
        this.request = request;
    }

    public BlockFetcher.Request request() {
        return request;
    }
}
