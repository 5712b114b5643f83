package org.rdmashuffle.transport.tcp;

import java.io.IOException;
import java.util.HashMap;
import java.util.Map;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.TransportContractTest;

/** The transport contract on the tcp provider over loopback. */
class TcpTransportContractTest extends TransportContractTest {
    @Override
    protected RdmaNode openNode(Map<String, String> settings, NodeOptions options) throws IOException {
        Map<String, String> s = new HashMap<>(settings);
        s.put("spark.shuffle.rdma.provider", "tcp");
        return new TcpNode(new RdmaShuffleConf(s), options);
    }
}
