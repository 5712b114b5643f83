package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.NodeOptions;

/**
 * {@code spark.shuffle.rdma.bindAddress} and {@code spark.shuffle.rdma.verbs.tos} on the tcp provider, over real
 * loopback sockets: with a bind address set, outgoing connections leave from it (127.0.0.2 here, which the
 * route to 127.0.0.1 would never choose by itself) and carry the ToS byte as IP_TOS; without, the kernel
 * chooses both.
 */
class TcpBindAndTosTest {
    private static final String BOUND = "127.0.0.2";

    private static RdmaShuffleConf conf(String bindAddress, int tos) {
        return new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.bindAddress", bindAddress, "spark.shuffle.rdma.verbs.tos", Integer.toString(tos)));
    }

    @Test
    @Timeout(30)
    void shouldConnectFromBoundAddressWithTosWhenBindAddressAndTosAreSet() throws Exception {
        try (TcpNode server = new TcpNode(conf("", -1), NodeOptions.loopback());
             TcpNode client = new TcpNode(conf(BOUND, 104),
                     new NodeOptions(BOUND, BOUND, ControlHandler.NONE, null))) {
            assertEquals(BOUND, client.localAddress().host());
            TcpChannel ch = (TcpChannel) client.connect(server.localAddress());
            InetSocketAddress local = (InetSocketAddress) ch.socket().getLocalAddress();
            assertEquals(BOUND, local.getAddress().getHostAddress());
            assertEquals(104, ch.socket().getOption(StandardSocketOptions.IP_TOS));
        }
    }

    @Test
    @Timeout(30)
    void shouldLeaveSourceAndTosToKernelWhenNeitherIsSet() throws Exception {
        try (TcpNode server = new TcpNode(conf("", -1), NodeOptions.loopback());
             TcpNode client = new TcpNode(conf("", -1), new NodeOptions(BOUND, BOUND, ControlHandler.NONE, null))) {
            TcpChannel ch = (TcpChannel) client.connect(server.localAddress());
            InetSocketAddress local = (InetSocketAddress) ch.socket().getLocalAddress();
            assertEquals("127.0.0.1", local.getAddress().getHostAddress());
            assertEquals(0, ch.socket().getOption(StandardSocketOptions.IP_TOS));
        }
    }
}
