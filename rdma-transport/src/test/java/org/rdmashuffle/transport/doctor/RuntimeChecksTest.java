package org.rdmashuffle.transport.doctor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.net.InetAddress;
import java.net.NetworkInterface;
import java.util.Collections;
import org.junit.jupiter.api.Test;

class RuntimeChecksTest {
    /** Whether an up, non-loopback interface of this host has an address that is neither loopback nor link-local. */
    private static boolean hasRoutableAddress() throws Exception {
        for (NetworkInterface n : Collections.list(NetworkInterface.getNetworkInterfaces())) {
            if (n.isUp() && !n.isLoopback()) {
                for (InetAddress a : Collections.list(n.getInetAddresses())) {
                    if (!a.isLoopbackAddress() && !a.isLinkLocalAddress()) {
                        return true;
                    }
                }
            }
        }
        return false;
    }

    @Test
    void shouldServeAndReportANonLoopbackAddressWhenNoBindIsGivenAndTheHostHasOne() throws Exception {
        assumeTrue(hasRoutableAddress(), "this host has no up interface with a non-loopback, non-link-local address");
        String host = RuntimeChecks.bindHost("");
        assertFalse(InetAddress.getByName(host).isLoopbackAddress(), host);
        Check c = RuntimeChecks.bind("");
        assertEquals(Check.Status.PASS, c.status(), c.toString());
        assertFalse(c.detail().contains("(this host: 127."), c.detail());
    }

    @Test
    void shouldWarnWhenTheBindAddressGivenIsLoopback() {
        Check c = RuntimeChecks.bind("127.0.0.1");
        assertEquals(Check.Status.WARN, c.status(), c.toString());
    }
}
