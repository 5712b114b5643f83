package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;

/**
 * Verbs nodes on the device the transport's tests emulate in the JVM ({@code EmulatedVerbs}, from the
 * transport's test jar), for benchmarks of what the provider does above the device on a machine without RDMA.
 * In this package because the emulated device and the node's constructor that takes it are package-private.
 */
public final class EmulatedVerbsNodes {
    private EmulatedVerbsNodes() {
    }

    /** A verbs node on a new emulated adapter; closing the node closes its device. */
    public static RdmaNode open(RdmaShuffleConf conf, NodeOptions options) throws IOException {
        return new VerbsNode(conf, options, new EmulatedVerbs().choice());
    }
}
