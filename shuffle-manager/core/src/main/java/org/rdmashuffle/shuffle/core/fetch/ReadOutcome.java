package org.rdmashuffle.shuffle.core.fetch;

/**
 * What a reader does about a READ or a block that failed, decided once by {@link FailedReadClassifier}; the
 * engine's adapter only turns it into the engine's own words (an exception, a report, a fallback). The origin it
 * concerns is the failure's {@link FetchFailure#request() request} (its peer and map output).
 */
public enum ReadOutcome {
    /** READ the block once more (its bytes were corrupt the first time). */
    RETRY,
    /**
     * The engine's own path serves it, nobody is blamed: the peer withdrew or replaced its node (its blocks), or
     * this reader's pool or memory gave out (every block not READ yet).
     */
    ENGINE_PATH,
    /** The peer failed to serve the origin: blame it for the failure's reason, so the engine reruns that map. */
    BLAME_PEER,
    /**
     * This reader's own node failed: nobody else is to blame; the blocks not READ yet take the engine's path (a
     * block whose records were handed on already cannot switch, and fails the task).
     */
    OWN_NODE_FAILED,
    /**
     * This reader's own trouble that no other path solves (an interrupted wait, a size no buffer can hold, the
     * engine's path refused by configuration): the task fails, blaming nobody.
     */
    LOCAL_FAILURE
}
