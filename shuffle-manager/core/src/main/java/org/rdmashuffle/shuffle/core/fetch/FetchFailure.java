package org.rdmashuffle.shuffle.core.fetch;

/** A block could not be fetched; {@link #request()} names which, so the caller can report the right map. */
public final class FetchFailure extends Exception {
    private static final long serialVersionUID = 1L;
    private final transient BlockFetcher.Request request;
    private final boolean stillOutstanding;

    public FetchFailure(BlockFetcher.Request request, String message, Throwable cause) {
        this(request, message, cause, false);
    }

    /**
     * @param stillOutstanding the request is still in the fetcher (a timeout names the oldest one in flight):
     *     its block may still come out of it; otherwise this failure is the request's result
     */
    public FetchFailure(BlockFetcher.Request request, String message, Throwable cause, boolean stillOutstanding) {
        super(message, cause);
        this.request = request;
        this.stillOutstanding = stillOutstanding;
    }

    public BlockFetcher.Request request() {
        return request;
    }

    /** Whether this failure is {@link #request()}'s result, so the fetcher will hand out nothing more for it. */
    public boolean isResult() {
        return request != null && !stillOutstanding;
    }
}
