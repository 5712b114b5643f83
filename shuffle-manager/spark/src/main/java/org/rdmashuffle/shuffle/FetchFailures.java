package org.rdmashuffle.shuffle;

import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.shuffle.core.directory.PeerDirectory;
import org.rdmashuffle.transport.NodeAddress;

/**
 * Where a reduce task blames a peer: {@link #fetchFailed} turns a {@link FetchFailure} the core's
 * {@code FailedReadClassifier} decided to blame on the peer into the {@code FetchFailedException} naming the block's
 * map output (so Spark reruns that map); {@link #nodeWithdrawn} is the Spark adapter's answer to the classifier's
 * question, asked before every blame of a READ block, whether the peer withdrew its node. Every blame of the
 * reader's classes goes through {@link #fetchFailed}, always on the task thread.
 */
final class FetchFailures {
    private final RdmaShuffleManager manager;
    private final int shuffleId;

    FetchFailures(RdmaShuffleManager manager, int shuffleId) {
        this.manager = manager;
        this.shuffleId = shuffleId;
    }

    /**
     * The {@code FetchFailedException} for a block, to throw. When the block was being READ (its origin names
     * the peer's node: lost peer, lying metadata, a failed stream window, corrupt bytes), this executor also
     * forgets what it cached of that node: the directory's address of the executor, and the node's output
     * table and metadata for this shuffle, so that a rerun asks and READs them afresh. Never starts the
     * runtime (it may be stopping).
     */
    RuntimeException fetchFailed(BlockOrigin o, FetchFailure f) {
        ExecutorRuntime rt;
        if (o.peer() != null && (rt = manager.startedRuntime()) != null) {
            rt.remote.forgetPeer(o.address().executorId(), o.peer(), shuffleId);
        }
        return SparkInterop.sneakyThrow(SparkInterop.fetchFailed(o.address(), shuffleId, o.blockId().mapId(),
                o.mapIndex(), o.blockId().reduceId(), f));
    }

    /**
     * Why {@code executorId}'s node at {@code peer}, which could not be reached, is not to blame — it failed
     * and left the driver's directory, or was replaced by a new one — asked of the driver afresh (at most
     * 5 s); null when the directory still names {@code peer} (or cannot be asked, or Spark removed the
     * executor): then the executor failed to serve, and a fetch failure names it.
     */
    static String nodeWithdrawn(ExecutorRuntime rt, String executorId, NodeAddress peer, long incarnation) {
        PeerDirectory.Found now = rt.directory.recheck(executorId);
        if (now == null || now.removed() || now.names(peer, incarnation)) {
            return null;
        }
        return now.address() == null
                ? "its node " + peer + " failed and left the driver's directory"
                : "its node " + peer + " failed and was replaced by " + now.address();
    }
}
