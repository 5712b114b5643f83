package org.rdmashuffle.shuffle;

import java.io.IOException;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Supplier;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.FailedReadClassifier;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.shuffle.core.fetch.ReadOutcome;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A reduce task's failed READs in Spark's words. What a failure means is not decided here: the core's
 * {@link FailedReadClassifier} decides it ({@link #failed}, {@link #corrupt}, and inside {@link #fetchFailed},
 * {@link #streamFailed}, {@link #readRestThroughSpark}) — this executor's own node failed, the peer withdrew its
 * node, READ again, or blame the peer — and this class only turns that {@link ReadOutcome} into Spark's exceptions,
 * metrics and path:
 * <ul>
 *   <li>{@code BLAME_PEER}: {@link FetchFailures#fetchFailed} (a FetchFailedException naming the block, after
 *       {@link RequestOrigins#blame} found it), or — when an external shuffle service serves the rest — every
 *       block not READ yet through Spark's client;</li>
 *   <li>{@code ENGINE_PATH}: the peer's blocks not READ yet to {@link SparkPathBlocks#later}; for the pool, every
 *       block not READ yet;</li>
 *   <li>{@code OWN_NODE_FAILED}: this executor's node is noted failed, and every block not READ yet goes to
 *       {@link SparkPathBlocks#later};</li>
 *   <li>{@code LOCAL_FAILURE}: the pool's exception fails the task.</li>
 * </ul>
 * It is the classifier's {@link FailedReadClassifier.PeerNodes}: whether a peer withdrew its node is asked of the
 * driver's directory ({@link FetchFailures#nodeWithdrawn}) once per peer and task. Once the READs are given up
 * ({@link #readsAbandoned}) it closes the fetcher. Task thread only.
 */
final class ReadOutcomeTranslator {
    private static final Logger LOG = LoggerFactory.getLogger(ReadOutcomeTranslator.class);

    private final ExecutorRuntime rt;
    private final int shuffleId;
    private final FetchFailures failures;
    private final SparkPathBlocks sparkPath;
    private final BlockFetcher fetcher;
    /** The blocks of each request, and the origin a failure concerns. */
    private final RequestOrigins origins;
    /** Which executor each peer node READ from belongs to. */
    private final RequestPlanner requests;
    /** The incarnation of each peer's node this task READs from, by executor. */
    private final Map<String, Long> incarnations;
    /** A failed READ sends the task's remaining blocks through Spark's client (an external shuffle service). */
    private final boolean sparkAfterFailure;
    private final FailedReadClassifier classifier;
    /** Peers whose node failed and left the directory (or was replaced) while this task READ from them. */
    private final Set<String> withdrawnPeers = new HashSet<>();
    /** Set once the READs were given up: the fetcher is closed. */
    private boolean readsAbandoned;

    ReadOutcomeTranslator(ExecutorRuntime rt, int shuffleId, FetchFailures failures, SparkPathBlocks sparkPath,
                          BlockFetcher fetcher, RequestOrigins origins, RequestPlanner requests,
                          Map<String, Long> incarnations, boolean sparkAfterFailure) {
        this.rt = rt;
        this.shuffleId = shuffleId;
        this.failures = failures;
        this.sparkPath = sparkPath;
        this.fetcher = fetcher;
        this.origins = origins;
        this.requests = requests;
        this.incarnations = incarnations;
        this.sparkAfterFailure = sparkAfterFailure;
        this.classifier = new FailedReadClassifier(rt::failed, this::peerWithdrew,
                rt.conf.fallback() != RdmaShuffleConf.Fallback.NEVER);
    }

    /** Where a peer's blocks go when its output table could not be looked up ({@link #tableLookupFailed}). */
    enum LookupFailed {
        /** This executor's node failed: the whole task reads through Spark's path, nobody blamed. */
        TASK_VIA_SPARK,
        /** The peer withdrew its node, or an external shuffle service serves its files: its blocks via Spark. */
        PEER_VIA_SPARK
    }

    /**
     * The output table of {@code first}'s executor, at {@code peer} (incarnation {@code incarnation}), could not be
     * looked up ({@code e}), before any READ of the task: the core decides ({@link FailedReadClassifier#failed}, a
     * {@link FetchFailure.Kind#TABLE} failure) whether this executor's node failed ({@code TASK_VIA_SPARK}), the
     * peer withdrew its node ({@code PEER_VIA_SPARK}, asked of the driver unless fallback=never) or the peer is
     * blamed: the FetchFailedException naming {@code first} is thrown — or, when an external shuffle service
     * serves the rest ({@code sparkAfterFailure}), the peer's blocks go through Spark's client
     * ({@code PEER_VIA_SPARK}), as after a failed READ ({@link #fetchFailed}).
     */
    static LookupFailed tableLookupFailed(ExecutorRuntime rt, FetchFailures failures, BlockOrigin first,
                                          NodeAddress peer, long incarnation, TransportException e,
                                          boolean sparkAfterFailure) {
        String executorId = first.address().executorId();
        String[] withdrawn = new String[1];
        FailedReadClassifier lookup = new FailedReadClassifier(rt::failed,
                r -> (withdrawn[0] = FetchFailures.nodeWithdrawn(rt, executorId, peer, incarnation)) != null,
                rt.conf.fallback() != RdmaShuffleConf.Fallback.NEVER);
        int reduceId = first.blockId().reduceId();
        FetchFailure f = new FetchFailure(new BlockFetcher.Request(peer, null, first.mapIndex(),
                first.blockId().mapId(), reduceId, reduceId + 1), FetchFailure.Kind.TABLE, e.getMessage(), e, false);
        ReadOutcome outcome = lookup.failed(f);
        if (outcome == ReadOutcome.OWN_NODE_FAILED) {
            // nothing was read yet: the whole task goes through Spark's path and nobody is blamed
            rt.nodeFailureSeen();
            LOG.debug("this executor's node failed ({}); the task reads through Spark's path", rt.failureReason(), e);
            return LookupFailed.TASK_VIA_SPARK;
        }
        if (outcome == ReadOutcome.ENGINE_PATH) {
            rt.reads.noteEnginePath(executorId, withdrawn[0]);
            return LookupFailed.PEER_VIA_SPARK;
        }
        if (sparkAfterFailure) { // gone, or going: the external shuffle service serves its files
            rt.reads.noteEnginePath(executorId, "its node cannot be reached (" + e.getMessage() + "); the external "
                    + "shuffle service serves its files", true);
            return LookupFailed.PEER_VIA_SPARK;
        }
        throw failures.fetchFailed(first, f);
    }

    /** Whether the READs were given up (the fetcher is closed): every request goes through Spark's path. */
    boolean readsAbandoned() {
        return readsAbandoned;
    }

    /** The core's decision on a failure that names a peer ({@link FailedReadClassifier#failed}). */
    ReadOutcome failed(FetchFailure f) {
        return classifier.failed(f);
    }

    /** The core's decision on a block whose decoding cannot start ({@link FailedReadClassifier#corrupt}). */
    ReadOutcome corrupt(FetchFailure f, boolean readAgainBefore) {
        return classifier.corrupt(f, readAgainBefore);
    }

    /**
     * A failure out of the fetcher: this executor's node failed (every block not taken yet through Spark's
     * path), the peer withdrew its node (its blocks through Spark's path), or the peer is blamed — through
     * Spark's client instead when an external shuffle service serves the rest.
     */
    void fetchFailed(FetchFailure f) {
        ReadOutcome outcome = classifier.failed(f);
        if (outcome == ReadOutcome.OWN_NODE_FAILED) {
            ownNodeFailed(f);
            return;
        }
        if (outcome == ReadOutcome.ENGINE_PATH) {
            peerToSparkPath(f.request().peer());
            return;
        }
        BlockOrigin o = origins.blame(f);
        if (o == null) {
            if (f.isResult()) {
                return; // a request whose blocks went through Spark's path since (its peer withdrew its node)
            }
            throw new IllegalStateException("a fetch failure names no block of this task: " + f.getMessage(), f);
        }
        if (sparkAfterFailure) {
            rt.remote.forgetPeer(o.address().executorId(), o.peer(), shuffleId); // fetchFailed does it otherwise
            rt.directory.removed(o.address().executorId()); // later tasks skip it if it is gone
            // An external shuffle service serves every executor's files, also of one that just went
            // (released by dynamic allocation, killed): the rest comes through Spark's client.
            rt.reads.noteEnginePath(o.address().executorId(), "a READ from it failed (" + f.getMessage()
                    + "); this task's remaining blocks come through Spark's client and the external "
                    + "shuffle service", true);
            abandonReads();
            return;
        }
        throw failures.fetchFailed(o, f);
    }

    /** {@code BLAME_PEER} for block {@code o}: the FetchFailedException to throw. */
    RuntimeException blame(BlockOrigin o, FetchFailure f) {
        return failures.fetchFailed(o, f);
    }

    /**
     * A failure of a taken block before any of its records were handed on, not blamed on the peer (the caller
     * gave the block back): its blocks not decoded yet, {@code rest}, go through Spark's path, with the peer's
     * other blocks not READ yet ({@code ENGINE_PATH}) or every block not READ yet ({@code OWN_NODE_FAILED}).
     */
    void notBlamed(ReadOutcome outcome, FetchFailure f, List<BlockOrigin> rest, NodeAddress peer) {
        sparkPath.later(rest);
        if (outcome == ReadOutcome.OWN_NODE_FAILED) {
            ownNodeFailed(f);
        } else {
            peerToSparkPath(peer);
        }
    }

    /**
     * The taken block {@code unregistered} at its peer's node ({@code why}, the core's reason; the caller gave it
     * back): its blocks {@code os} go through Spark's path — or, when its executor does not hold the map output
     * and fallback=never keeps readers off Spark's path, the FetchFailedException naming it is thrown.
     */
    void unregistered(BlockFetcher.Request r, List<BlockOrigin> os, String why) {
        BlockOrigin o = os.get(0);
        if (why.equals(BlockFetcher.NOT_IN_TABLE) && rt.conf.fallback() == RdmaShuffleConf.Fallback.NEVER) {
            throw failures.fetchFailed(o, new FetchFailure(r, "executor " + o.address().executorId()
                    + " does not hold map output " + o.mapIndex() + " in its output table (migrated there by "
                    + "decommissioning, or lost) and fallback=never keeps readers off Spark's path", null));
        }
        rt.reads.noteEnginePath(o.address().executorId(), why, why.equals(BlockFetcher.NOT_IN_TABLE));
        sparkPath.later(os);
    }

    /**
     * A streamed block's window failed after records of the block were handed on (the caller gave the block
     * back): as {@link #handedOnFailed}.
     */
    RuntimeException streamFailed(BlockOrigin o, BlockFetcher.StreamFailed e) {
        ReadOutcome outcome = classifier.failed(e.failure());
        return outcome == ReadOutcome.BLAME_PEER
                ? failures.fetchFailed(o, e.failure()) // forgets the peer's cached table and metadata too
                : handedOnFailed(o, outcome, "streamed", e);
    }

    /**
     * Bytes of a READ block, {@code r}, found corrupt ({@code e}) while its records were read, some handed on
     * already (the caller gave the block back): the core decides as for any failure naming the peer
     * ({@link FailedReadClassifier#failed}, {@code CORRUPT}); {@code BLAME_PEER} is the FetchFailedException
     * naming the block with the cause {@code diagnosis} finds (asked only then), the rest as
     * {@link #handedOnFailed}.
     */
    RuntimeException corruptMidDecode(BlockOrigin o, BlockFetcher.Request r, IOException e, Supplier<String> diagnosis) {
        ReadOutcome outcome = classifier.failed(BlockDecoder.corruption(o, r, null, e));
        if (outcome != ReadOutcome.BLAME_PEER) {
            return handedOnFailed(o, outcome, "decoded", e);
        }
        return failures.fetchFailed(o, BlockDecoder.corruption(o, r, BlockDecoder.diagnosed(o, diagnosis), e));
    }

    /**
     * A block failed after records of it were handed on, not blamed on the peer ({@code OWN_NODE_FAILED}, or
     * {@code ENGINE_PATH}: the peer withdrew its node): the block cannot switch to Spark's path midway, so the task
     * fails blaming nobody (it is retried); the peer's other blocks not READ yet go through Spark's path.
     *
     * @param doing what was done with the block ("streamed", "decoded")
     */
    private RuntimeException handedOnFailed(BlockOrigin o, ReadOutcome outcome, String doing, Exception cause) {
        if (outcome == ReadOutcome.OWN_NODE_FAILED) {
            rt.nodeFailureSeen();
            return new IllegalStateException("this executor's RDMA node failed while block " + o.blockId()
                    + " was " + doing + " (" + rt.failureReason() + "); the task is retried", cause);
        }
        peerToSparkPath(o.peer());
        return new IllegalStateException("executor " + o.address().executorId() + " withdrew its RDMA node while "
                + "block " + o.blockId() + " was " + doing + " from it; the task is retried, blaming nobody", cause);
    }

    /**
     * The pool gave no room for a taken block's first window (the caller gave the block back; no record of it was
     * handed on): its blocks not decoded yet, {@code rest}, go through Spark's path, then as
     * {@link #readRestThroughSpark} every block not READ yet.
     */
    void firstWindowPoolFailed(List<BlockOrigin> rest, BufferPoolException e) {
        sparkPath.later(rest);
        readRestThroughSpark(e); // rethrows what is not the pool's room or the host's memory, or fallback=never
    }

    /**
     * When this executor cannot get memory for receive buffers — allocating or registering it failed
     * (a locked-memory or mapping limit of the host, direct memory) — the blocks not yet READ are
     * fetched through Spark's path instead, after the ones already taken: the serving executors'
     * files are Spark's, so nothing is lost and no peer is blamed. Other pool trouble (at its own
     * cap past the acquire timeout, interrupted), or {@code fallback=never}, fails the task.
     * {@code e} null: the READs were given up already and new requests follow the rest.
     */
    void readRestThroughSpark(BufferPoolException e) {
        ReadOutcome outcome = e == null ? ReadOutcome.ENGINE_PATH : classifier.poolFailed(e);
        if (outcome == ReadOutcome.LOCAL_FAILURE) {
            throw e; // interrupted (a killed task), a size no buffer can hold, or fallback=never
        }
        if (!readsAbandoned && e != null) {
            if (outcome == ReadOutcome.OWN_NODE_FAILED) { // the pool closes with a failed node's runtime
                rt.nodeFailureSeen();
            } else if (e.exhausted()) {
                rt.reads.notePoolExhausted(e);
            } else {
                rt.reads.noteReceiveMemoryUnavailable(e);
            }
        }
        abandonReads();
    }

    /**
     * This executor's own node failed (a transport loop or the device could not go on), which made a READ
     * fail: nobody else is to blame. Every block not taken yet goes through Spark's path.
     */
    private void ownNodeFailed(FetchFailure f) {
        rt.nodeFailureSeen();
        LOG.debug("this executor's node failed ({}); the task's remaining blocks go through Spark's path",
                rt.failureReason(), f);
        abandonReads();
    }

    /**
     * Whether the peer of a failed request withdrew its node (it failed) or replaced it since this task
     * looked it up ({@link FailedReadClassifier.PeerNodes}): then this task's blocks of that peer go through
     * Spark's path. Asks the driver once per peer and task (a no answers again at the next failure).
     */
    private boolean peerWithdrew(BlockFetcher.Request r) {
        String id = requests.executorOf(r.peer());
        if (id == null) {
            return false;
        }
        if (withdrawnPeers.contains(id)) {
            return true;
        }
        Long incarnation = incarnations.get(id);
        String why = FetchFailures.nodeWithdrawn(rt, id, r.peer(), incarnation == null ? 0 : incarnation);
        if (why == null) {
            return false;
        }
        withdrawnPeers.add(id);
        rt.remote.forgetPeer(id, r.peer(), shuffleId);
        rt.reads.noteEnginePath(id, why);
        return true;
    }

    /** The peer withdrew its node: this task's blocks of it not READ yet go through Spark's path. */
    private void peerToSparkPath(NodeAddress peer) {
        for (List<BlockOrigin> os : origins.removePeer(peer)) {
            sparkPath.later(os);
        }
    }

    /** Every request the fetcher has not handed out goes through Spark's path; no more READs. */
    private void abandonReads() {
        for (List<BlockOrigin> os : origins.removeAll()) {
            sparkPath.later(os);
        }
        if (!readsAbandoned) {
            readsAbandoned = true;
            fetcher.close(); // buffers of READs still in flight come back as they land
        }
    }
}
