package org.rdmashuffle.shuffle;

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
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/** Executors register with the driver's directory and answer table lookups, over real tcp nodes. */
class ControlProtocolTest {
    private static final RdmaShuffleConf TCP = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp"));

    private static ByteBuffer call(RdmaChannel ch, ByteBuffer req) throws Exception {
        return ch.call(req).get(10, TimeUnit.SECONDS);
    }

    @Test
    @Timeout(30)
    void shouldFindRegisteredExecutorsAndTheirTablesWhenAsked() throws Exception {
        ControlProtocol.Directory directory = new ControlProtocol.Directory();
        RegionDescriptor table7 = new RegionDescriptor(4L << 32, 320, 0x1234);
        try (RdmaNode driver = RdmaTransport.open(TCP, NodeOptions.loopback().withControlHandler(directory));
             RdmaNode executor = RdmaTransport.open(TCP, NodeOptions.loopback().withControlHandler(
                     ControlProtocol.tables(shuffle -> shuffle == 7 ? table7 : null)));
             RdmaNode reducer = RdmaTransport.open(TCP, NodeOptions.loopback())) {
            RdmaChannel toDriver = executor.connect(driver.localAddress());
            call(toDriver, ControlProtocol.registerExecutor("exec-1", executor.localAddress()));
            assertEquals(1, directory.size());

            RdmaChannel reducerToDriver = reducer.connect(driver.localAddress());
            NodeAddress found = ControlProtocol.parseAddressReply(call(reducerToDriver,
                    ControlProtocol.lookupExecutor("exec-1")));
            assertEquals(executor.localAddress(), found);
            assertNull(ControlProtocol.parseAddressReply(call(reducerToDriver, ControlProtocol.lookupExecutor("exec-9"))));

            RdmaChannel toExecutor = reducer.connect(found);
            assertEquals(table7, ControlProtocol.parseTableReply(call(toExecutor, ControlProtocol.lookupTable(7))));
            assertNull(ControlProtocol.parseTableReply(call(toExecutor, ControlProtocol.lookupTable(8))));

            directory.remove("exec-1");
            assertNull(ControlProtocol.parseAddressReply(call(reducerToDriver, ControlProtocol.lookupExecutor("exec-1"))));

            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> call(toExecutor, ControlProtocol.lookupExecutor("exec-1")));
            assertEquals(ReadStatus.HANDLER_FAILED, ((TransportException) e.getCause()).status());
            assertTrue(toExecutor.isOpen(), "a refused control message leaves the channel open");
        }
    }
}
