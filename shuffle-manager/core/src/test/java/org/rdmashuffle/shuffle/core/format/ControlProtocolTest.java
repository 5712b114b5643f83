package org.rdmashuffle.shuffle.core.format;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/** Executors answer table lookups over real tcp nodes. */
class ControlProtocolTest {
    private static final RdmaShuffleConf TCP = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp"));

    private static ByteBuffer call(RdmaChannel ch, ByteBuffer req) throws Exception {
        return ch.call(req).get(10, TimeUnit.SECONDS);
    }

    @Test
    @Timeout(30)
    void shouldAnswerTableLookupsAndRefuseOtherMessages() throws Exception {
        RegionDescriptor table7 = new RegionDescriptor(4L << 32, 320, 0x1234);
        try (RdmaNode executor = RdmaTransport.open(TCP, NodeOptions.loopback().withControlHandler(
                     ControlProtocol.tables(shuffle -> shuffle == 7 ? table7 : null)));
             RdmaNode reducer = RdmaTransport.open(TCP, NodeOptions.loopback())) {
            RdmaChannel toExecutor = reducer.connect(executor.localAddress());
            assertEquals(table7, ControlProtocol.parseTableReply(call(toExecutor, ControlProtocol.lookupTable(7))));
            assertNull(ControlProtocol.parseTableReply(call(toExecutor, ControlProtocol.lookupTable(8))));
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> call(toExecutor, ByteBuffer.wrap(new byte[] {99, 0, 0})));
            assertEquals(ReadStatus.HANDLER_FAILED, ((TransportException) e.getCause()).status());
            assertTrue(toExecutor.isOpen(), "a refused control message leaves the channel open");
        }
    }
}
