package org.rdmashuffle.transport.verbs;

/**
 * What the DiSNI path does with the work completions and rdma_cm events DiSNI hands its endpoints
 * ({@link VerbsEndpoint}), apart from DiSNI's types, so that it can be tested where libdisni is not.
 */
final class DisniEvents {
    private final VerbsNode node;

    /**
     * @param node  the node whose endpoints these are
     * @param ports the states of the device's ports
     */
    DisniEvents(VerbsNode node, PortStates ports) {
        this.node = node;
    }

    /** A work completion of {@code qp}, on DiSNI's completion thread; {@code c} is its channel (or null). */
    void onCompletion(VerbsChannel c, QueuePair qp, long wrId, int status) {
        if (c != null) {
            c.onCompletion(qp, wrId, status);
        }
    }

    /**
     * A client queue pair disconnected, or rdma_cm reported its device removed, on DiSNI's
     * connection-manager thread.
     */
    void onDisconnected(QueuePair qp, boolean deviceRemoved) {
        node.queuePairDisconnected(qp);
    }
}
