package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.util.HashMap;
import java.util.Map;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.TransportContractTest;

/**
 * The transport contract on the verbs provider's node and channels over {@link EmulatedVerbs}, a device
 * emulated in the JVM: everything above the device (control path, admission, READ window, selective
 * signaling, failure diagnosis and repost, timeouts) runs in CI, where no RDMA device exists. The same
 * contract over a real device is {@link VerbsTransportContractTest}, run by the SoftiWARP/Soft-RoCE harness.
 */
class EmulatedVerbsContractTest extends TransportContractTest {
    @Override
    protected RdmaNode openNode(Map<String, String> settings, NodeOptions options) throws IOException {
        Map<String, String> s = new HashMap<>(settings);
        s.put("spark.shuffle.rdma.provider", "verbs");
        s.putIfAbsent("spark.shuffle.rdma.verbs.maxQpReadAtoms", "16");
        s.putIfAbsent("spark.shuffle.rdma.verbs.completionQueueSize", "256");
        return new VerbsNode(new RdmaShuffleConf(s), options, new EmulatedVerbs().choice());
    }

    @Override
    protected boolean servingNodeCountsReads() {
        return false; // one-sided: the serving node's CPU never sees a READ
    }
}
