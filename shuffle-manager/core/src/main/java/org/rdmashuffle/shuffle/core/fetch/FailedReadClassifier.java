package org.rdmashuffle.shuffle.core.fetch;

import java.util.function.BooleanSupplier;
import org.rdmashuffle.pool.BufferPoolException;

/**
 * Decides, once for every engine, what a reader does about a READ or a block that failed ({@link ReadOutcome}):
 * a failed or timed-out READ, a failed window of a streamed block, a size that does not match the engine's
 * tracker, bytes corrupt after their re-READ or while their records are read, a peer's output table that cannot be
 * looked up, this reader's own node failing, a peer that withdrew or replaced its
 * node, a pool that gives no buffer. The engine's adapter supplies what only it can know — whether this reader's
 * node failed, whether a peer withdrew its node ({@link PeerNodes}), whether the engine has a path of its own to
 * fall back to — and turns the outcome into the engine's words.
 *
 * <p>Order of the questions: this reader's node first (a failure of its own is nobody else's), then — for every
 * failure that would blame a peer — whether that peer withdrew its node. Task thread only; allocates nothing.
 */
public final class FailedReadClassifier {
    /** What the engine's adapter knows of its peers' nodes. */
    @FunctionalInterface
    public interface PeerNodes {
        /**
         * Whether the peer serving {@code origin} withdrew its node (it failed and left the directory) or replaced
         * it since this reader looked it up: then it is not to blame, and the engine's path serves its blocks. May
         * ask a remote directory (bounded by its own timeout); an adapter may remember the answer per peer.
         */
        boolean withdrew(BlockFetcher.Request origin);
    }

    private final BooleanSupplier ownNodeFailed;
    private final PeerNodes peers;
    private final boolean enginePathAllowed;

    /**
     * @param ownNodeFailed whether this reader's node failed (one volatile read: asked on every failure)
     * @param peers whether a peer withdrew its node
     * @param enginePathAllowed whether blocks may go through the engine's own path instead of failing (false:
     *     the engine's path is refused by configuration)
     */
    public FailedReadClassifier(BooleanSupplier ownNodeFailed, PeerNodes peers, boolean enginePathAllowed) {
        this.ownNodeFailed = ownNodeFailed;
        this.peers = peers;
        this.enginePathAllowed = enginePathAllowed;
    }

    /**
     * A failure that names a peer: a READ that failed or timed out, a streamed block's window, a size the tracker
     * does not allow, bytes corrupt after their re-READ or while their records were read, an output table lookup
     * ({@link FetchFailure.Kind#TABLE}). The caller knows whether records of the block were handed on already
     * (then {@link ReadOutcome#ENGINE_PATH} cannot take that block, and the task fails blaming nobody).
     *
     * @return {@link ReadOutcome#OWN_NODE_FAILED}, {@link ReadOutcome#ENGINE_PATH} (the peer withdrew its node)
     *     or {@link ReadOutcome#BLAME_PEER}
     */
    public ReadOutcome failed(FetchFailure f) {
        if (ownNodeFailed.getAsBoolean()) {
            return ReadOutcome.OWN_NODE_FAILED;
        }
        if (enginePathAllowed && f.request() != null && peers.withdrew(f.request())) { // whatever the kind
            return ReadOutcome.ENGINE_PATH;
        }
        return ReadOutcome.BLAME_PEER;
    }

    /**
     * A block whose decoding cannot start (corrupt bytes): READ once more, or — corrupt again after that — as
     * {@link #failed}.
     *
     * @param readAgainBefore whether the block was READ again already
     */
    public ReadOutcome corrupt(FetchFailure f, boolean readAgainBefore) {
        return readAgainBefore ? failed(f) : ReadOutcome.RETRY;
    }

    /**
     * The pool gave no buffer: {@link ReadOutcome#ENGINE_PATH} for every block not READ yet when it stayed at
     * its cap past the acquire timeout or the host refused memory, {@link ReadOutcome#OWN_NODE_FAILED} when the
     * pool closed with this reader's failed node, else {@link ReadOutcome#LOCAL_FAILURE} (an interrupted wait, a
     * size no buffer can hold, or no engine path allowed).
     */
    public ReadOutcome poolFailed(BufferPoolException e) {
        if (!enginePathAllowed) {
            return ReadOutcome.LOCAL_FAILURE;
        }
        if (ownNodeFailed.getAsBoolean()) {
            return ReadOutcome.OWN_NODE_FAILED;
        }
        return e.memoryUnavailable() || e.exhausted() ? ReadOutcome.ENGINE_PATH : ReadOutcome.LOCAL_FAILURE;
    }
}
