package org.rdmashuffle.shuffle.core.fetch;

/**
 * A block could not be fetched; {@link #request()} names which, so the caller can report the right map, and
 * {@link #kind()} says how it failed. What the reader does about it is decided once, by
 * {@link FailedReadClassifier}.
 */
public final class FetchFailure extends Exception {
    private static final long serialVersionUID = 1L;

    /** How a block failed. */
    public enum Kind {
        /**
         * A READ completed with an error, could not be posted, the peer could not be connected, or what its output
         * table or metadata claims does not hold.
         */
        READ,
        /** Nothing landed within the request timeout: the request named is the one whose READ waited longest. */
        TIMEOUT,
        /** A window of a streamed block failed (its READ failed or could not be posted). */
        WINDOW,
        /** The block's size does not match what the engine's map output tracker says of it. */
        SIZE,
        /**
         * The block's bytes are corrupt: also after they were READ again, or found so while its records were read
         * (some handed on already, so the block cannot go through the engine's path).
         */
        CORRUPT,
        /**
         * The peer's output table could not be looked up (its node could not be reached or answered with an
         * error), before any READ of its blocks: the request names the peer and the first block's map output, its
         * {@link BlockFetcher.Request#table() table} is null (not known).
         */
        TABLE
    }

    private final transient BlockFetcher.Request request;
    private final boolean stillOutstanding;
    private final Kind kind;

    public FetchFailure(BlockFetcher.Request request, String message, Throwable cause) {
        this(request, message, cause, false);
    }

    /**
     * @param stillOutstanding the request is still in the fetcher (a timeout names the oldest one in flight):
     *     its block may still come out of it; otherwise this failure is the request's result
     */
    public FetchFailure(BlockFetcher.Request request, String message, Throwable cause, boolean stillOutstanding) {
        this(request, Kind.READ, message, cause, stillOutstanding);
    }

    /** A failure of {@code kind}; see {@link #FetchFailure(BlockFetcher.Request, String, Throwable, boolean)}. */
    public FetchFailure(BlockFetcher.Request request, Kind kind, String message, Throwable cause,
                        boolean stillOutstanding) {
        super(message, cause);
        this.request = request;
        this.kind = kind;
        this.stillOutstanding = stillOutstanding;
    }

    /** The request the failure concerns: its peer and map output are the origin to blame. */
    public BlockFetcher.Request request() {
        return request;
    }

    public Kind kind() {
        return kind;
    }

    /** Whether this failure is {@link #request()}'s result, so the fetcher will hand out nothing more for it. */
    public boolean isResult() {
        return request != null && !stillOutstanding;
    }
}
