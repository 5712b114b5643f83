package org.rdmashuffle.transport.verbs;

import org.rdmashuffle.conf.RdmaShuffleConf;

/**
 * What a verbs node connects and accepts its RC queue pairs with, and how many READs a channel keeps
 * outstanding on one. No DiSNI types: tested without a device.
 *
 * <p>What DiSNI 2.1 lets a node choose: {@code retry_count} and {@code rnr_retry_count} of the rdma_cm
 * connection parameters, passed unchanged to {@code rdma_connect} and {@code rdma_accept} (both
 * default to 0 in DiSNI, which on InfiniBand and RoCE fails a queue pair at its first lost packet).
 * What it does not: {@code initiator_depth} and {@code responder_resources}. Their setters in
 * {@code RdmaConnParam} throw "Operation currently not supported", DiSNI's Java layer hands neither to
 * libdisni, and libdisni 2.1's connect and accept set both to the device's {@code max_qp_rd_atom}. Nor
 * does DiSNI bind {@code ibv_query_device} or {@code ibv_query_qp}, so a node cannot read that number.
 *
 * <p>What the node controls instead is the READ window, kept within what both queue pairs of a
 * connection accept: at most {@code readDepth} ({@code verbs.maxQpReadAtoms}, which the operator sets at
 * most to the device's {@code max_qp_rd_atom}) as requester, at most the peer's {@code readDepth} — sent
 * in the peer's hello over the control connection — as the peer's responder resources, and at most
 * {@code maxReadsInFlightPerPeer}.
 *
 * @param readDepth     READs this node's queue pairs keep outstanding as requester, and accept as responder
 * @param retryCount    rdma_cm {@code retry_count}, 0..7
 * @param rnrRetryCount rdma_cm {@code rnr_retry_count}, 0..7 (7: retry without limit)
 */
record QueuePairParameters(int readDepth, int retryCount, int rnrRetryCount) {
    /** The largest retry count the 3-bit fields of InfiniBand's connection messages hold. */
    static final int MAX_RETRY = 7;
    /** rdma_cm carries the depths in one byte. */
    static final int MAX_DEPTH = 255;

    QueuePairParameters {
        if (readDepth < 1 || readDepth > MAX_DEPTH) {
            throw new IllegalArgumentException("READ depth " + readDepth + " is outside 1.." + MAX_DEPTH);
        }
        if (retryCount < 0 || retryCount > MAX_RETRY) {
            throw new IllegalArgumentException("retry_count " + retryCount + " is outside 0.." + MAX_RETRY);
        }
        if (rnrRetryCount < 0 || rnrRetryCount > MAX_RETRY) {
            throw new IllegalArgumentException("rnr_retry_count " + rnrRetryCount + " is outside 0.." + MAX_RETRY);
        }
    }

    /** From the validated configuration; a depth above what rdma_cm carries is lowered to it. */
    static QueuePairParameters of(RdmaShuffleConf conf) {
        return new QueuePairParameters(Math.min(conf.verbsMaxQpReadAtoms(), MAX_DEPTH), conf.verbsRetryCount(),
                conf.verbsRnrRetryCount());
    }

    /**
     * READs a channel to a peer keeps outstanding: the smallest of {@code maxReadsInFlightPerPeer}, this
     * node's READ depth and the peer's.
     *
     * @throws IllegalArgumentException when the peer's depth is not a depth (a malformed hello)
     */
    int readWindow(int maxReadsInFlightPerPeer, int peerReadDepth) {
        if (peerReadDepth < 1 || peerReadDepth > MAX_DEPTH) {
            throw new IllegalArgumentException("the peer's READ depth " + peerReadDepth + " is outside 1.." + MAX_DEPTH);
        }
        if (maxReadsInFlightPerPeer < 1) {
            throw new IllegalArgumentException("maxReadsInFlightPerPeer " + maxReadsInFlightPerPeer + " is below 1");
        }
        return Math.min(maxReadsInFlightPerPeer, Math.min(readDepth, peerReadDepth));
    }

    /** The most READs any channel of this node keeps outstanding (the size of its queue pairs' send queues). */
    int maxReadWindow(int maxReadsInFlightPerPeer) {
        return Math.min(maxReadsInFlightPerPeer, readDepth);
    }

    /**
     * The one line logged per channel and shown by the diagnosis accessors: what the queue pair was
     * connected with and why the READ window is what it is.
     */
    String describe(int maxReadsInFlightPerPeer, int peerReadDepth) {
        return describe(maxReadsInFlightPerPeer, peerReadDepth,
                "initiator_depth=device max_qp_rd_atom, responder_resources=device max_qp_rd_atom (set by libdisni)");
    }

    /** As {@link #describe(int, int)}, with {@code depths} saying what the READ depths were set to and by what. */
    String describe(int maxReadsInFlightPerPeer, int peerReadDepth, String depths) {
        int window = readWindow(maxReadsInFlightPerPeer, peerReadDepth);
        StringBuilder b = new StringBuilder()
                .append(depths).append(", retry_count=").append(retryCount)
                .append(", rnr_retry_count=").append(rnrRetryCount)
                .append(rnrRetryCount == MAX_RETRY ? " (unlimited)" : "")
                .append("; READs in flight ").append(window)
                .append(" = min(maxReadsInFlightPerPeer ").append(maxReadsInFlightPerPeer)
                .append(", verbs.maxQpReadAtoms ").append(readDepth)
                .append(", the peer's ").append(peerReadDepth).append(')');
        if (peerReadDepth < Math.min(maxReadsInFlightPerPeer, readDepth)) {
            b.append(", lowered from ").append(Math.min(maxReadsInFlightPerPeer, readDepth))
                    .append(" to the peer's READ depth");
        }
        return b.toString();
    }
}
