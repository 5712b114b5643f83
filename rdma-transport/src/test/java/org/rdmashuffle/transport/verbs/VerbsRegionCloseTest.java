package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.RegionAccess;

/** A node closing while one of its regions is being deregistered on another thread (a job stop's worker). */
class VerbsRegionCloseTest {
    private static final RdmaShuffleConf CONF = EmulatedPeers.conf(Map.of());

    @Test
    @Timeout(60)
    void shouldCloseTheDeviceOnlyAfterADeregistrationUnderWayOnAnotherThreadReturned() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        VerbsNode node = EmulatedPeers.node(device, CONF, "127.0.0.1", null);
        MemoryRegion region = node.register(ByteBuffer.allocateDirect(4096), RegionAccess.REMOTE_READ);
        CountDownLatch release = new CountDownLatch(1);
        device.deregistering = new CountDownLatch(1);
        device.deregisterGate = release;
        Thread deregistering = new Thread(region::close, "deregistering");
        Thread closing = new Thread(node::close, "closing");
        try {
            deregistering.start();
            device.deregistering.await(); // ibv_dereg_mr under way
            closing.start();
            // until the node's close has returned (the device closed under the deregistration) or waits for it
            while (closing.isAlive() && !waitsForTheRegion(closing)) {
                Thread.sleep(1);
            }
        } finally {
            release.countDown();
            deregistering.join();
            closing.join();
        }
        assertEquals(0, device.deregsAfterClose.get(), "the device was closed while a region was being deregistered");
        assertEquals(0, node.stats().registeredRegions());
    }

    private static boolean waitsForTheRegion(Thread t) {
        StackTraceElement[] at = t.getStackTrace();
        return t.getState() == Thread.State.BLOCKED && at.length > 0
                && at[0].getClassName().equals(VerbsRegion.class.getName()) && at[0].getMethodName().equals("close");
    }
}
