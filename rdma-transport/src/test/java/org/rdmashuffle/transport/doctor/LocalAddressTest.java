package org.rdmashuffle.transport.doctor;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.net.Inet6Address;
import java.net.InetAddress;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;

class LocalAddressTest {
    private static InetAddress ip(String literal) throws Exception {
        return InetAddress.getByName(literal);
    }

    private static InetAddress scoped(String literal, int scope) throws Exception {
        return Inet6Address.getByAddress(null, ip(literal).getAddress(), scope);
    }

    @Test
    void shouldPickTheFirstRoutableIpv4AddressWhenInterfacesHaveSeveral() throws Exception {
        List<RuntimeChecks.Interface> host = List.of(
                new RuntimeChecks.Interface("lo", true, true, List.of(ip("127.0.0.1"), ip("::1"))),
                new RuntimeChecks.Interface("ib0", false, false, List.of(ip("10.9.0.1"))),
                new RuntimeChecks.Interface("eth0", true, false,
                        List.of(scoped("fe80::1", 2), scoped("fd00::2", 2), ip("169.254.3.4"), ip("192.0.2.2"))),
                new RuntimeChecks.Interface("eth1", true, false, List.of(ip("198.51.100.2"))));
        assertEquals(Optional.of(ip("192.0.2.2")), RuntimeChecks.localAddress(host));
    }

    @Test
    void shouldPickAnUnscopedIpv6AddressWhenNoInterfaceHasIpv4() throws Exception {
        List<RuntimeChecks.Interface> host = List.of(
                new RuntimeChecks.Interface("lo", true, true, List.of(ip("127.0.0.1"))),
                new RuntimeChecks.Interface("net1", true, false, List.of(scoped("fe80::1", 3), scoped("fd00::7", 3))));
        Optional<InetAddress> a = RuntimeChecks.localAddress(host);
        assertEquals("fd00:0:0:0:0:0:0:7", a.orElseThrow().getHostAddress());
    }

    @Test
    void shouldPickNothingWhenOnlyLoopbackIsUp() throws Exception {
        List<RuntimeChecks.Interface> host = List.of(
                new RuntimeChecks.Interface("lo", true, true, List.of(ip("127.0.0.1"), ip("127.0.1.1"))),
                new RuntimeChecks.Interface("eth0", false, false, List.of(ip("192.0.2.2"))));
        assertEquals(Optional.empty(), RuntimeChecks.localAddress(host));
    }
}
