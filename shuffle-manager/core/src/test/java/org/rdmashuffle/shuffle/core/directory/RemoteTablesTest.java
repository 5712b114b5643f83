package org.rdmashuffle.shuffle.core.directory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.TreeSet;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;

class RemoteTablesTest {
    private static final NodeAddress FIXED_PORT = new NodeAddress("10.0.0.7", 40000, "tcp");

    @Test
    void shouldNotAnswerForAnExecutorThatReplacedAnotherOnTheSameHostAndFixedPort() {
        RemoteTables tables = new RemoteTables();
        RegionDescriptor old = new RegionDescriptor(0x1000, 32 * 8, 17);
        tables.put("1", FIXED_PORT, 7, 3, old);
        assertEquals(old, tables.get("1", FIXED_PORT, 7, 3));
        assertNull(tables.get("1", FIXED_PORT, 8, 3), "the failed node's table answered for the one started after it");
        // executor 1 died; executor 4 started on the same host and the configured fixed port
        assertNull(tables.get("4", FIXED_PORT, 7, 3), "the dead executor's table answered for its successor");
    }

    @Test
    void shouldForgetByExecutorNodeAndShuffle() {
        RemoteTables tables = new RemoteTables();
        NodeAddress other = new NodeAddress("10.0.0.8", 40000, "tcp");
        RegionDescriptor d = new RegionDescriptor(0x1000, 256, 1);
        tables.put("1", FIXED_PORT, 1, 3, d);
        tables.put("1", FIXED_PORT, 1, 4, d);
        tables.put("2", other, 1, 3, d);
        TreeSet<Integer> held = new TreeSet<>();
        tables.addShufflesTo(held);
        assertEquals(java.util.Set.of(3, 4), held);
        tables.forget("1", FIXED_PORT, 4);
        assertNull(tables.get("1", FIXED_PORT, 1, 4));
        tables.forgetShuffle(3);
        assertNull(tables.get("2", other, 1, 3));
        tables.put("2", other, 1, 5, d);
        tables.forgetNode(other);
        assertNull(tables.get("2", other, 1, 5));
    }
}
