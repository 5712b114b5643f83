package org.rdmashuffle.transport.verbs;

/**
 * What the DiSNI path does with the work completions and rdma_cm events DiSNI hands its endpoints
 * ({@link VerbsEndpoint}), apart from DiSNI's types, so that it can be tested where libdisni is not.
 * Before a failure reaches a channel, the node's own failure is recorded when its device's ports are down
 * or rdma_cm reports the device removed ({@link LocalPorts}), as the {@code java.lang.foreign} device
 * does: the core asks the node whether it failed before it blames the peer.
 */
final class DisniEvents {
    private final VerbsNode node;
    private final LocalPorts ports;

    /**
     * @param node  the node whose endpoints these are
     * @param ports the states of the device's ports
     */
    DisniEvents(VerbsNode node, PortStates ports) {
        this(node, "the node's RDMA device", ports);
    }

    /**
     * @param node   the node whose endpoints these are
     * @param device the device's name, for the node's failure
     * @param ports  the states of the device's ports
     */
    DisniEvents(VerbsNode node, String device, PortStates ports) {
        this.node = node;
        this.ports = new LocalPorts(device, ports, node::deviceFailed);
    }

    /** rdma_cm reported the device of an accepted queue pair removed. */
    void onDeviceRemoved() {
        ports.deviceRemoved();
    }

    /** On the node's timer (READs that time out make no completion). */
    void checkPorts() {
        ports.check();
    }

    /** A work completion of {@code qp}, on DiSNI's completion thread; {@code c} is its channel (or null). */
    void onCompletion(VerbsChannel c, QueuePair qp, long wrId, int status) {
        if (status != WcStatus.SUCCESS) {
            ports.check();
        }
        if (c != null) {
            c.onCompletion(qp, wrId, status);
        }
    }

    /**
     * A client queue pair disconnected, or rdma_cm reported its device removed, on DiSNI's
     * connection-manager thread.
     */
    void onDisconnected(QueuePair qp, boolean deviceRemoved) {
        if (deviceRemoved) {
            ports.deviceRemoved();
        } else {
            ports.check();
        }
        node.queuePairDisconnected(qp);
    }
}
