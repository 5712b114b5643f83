package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.util.Map;

/**
 * The states of an RDMA device's ports, as the kernel shows them in sysfs
 * ({@code /sys/class/infiniband/<device>/ports/<n>/state}: "4: ACTIVE", "1: DOWN"), by port number.
 * What tells a local link failure from a peer's: neither DiSNI nor the provider's completions say whose
 * side a failed READ broke on.
 */
@FunctionalInterface
interface PortStates {
    /**
     * @return every port's state now, by port number (empty when the device has none to show)
     * @throws IOException when they cannot be read
     */
    Map<Integer, String> read() throws IOException;
}
