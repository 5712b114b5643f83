package org.rdmashuffle.transport;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.NetworkInterface;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.Optional;
import org.junit.jupiter.api.Test;

class BindAddressTest {
    private static final String KEY = "spark.shuffle.rdma.bindAddress";

    /** A global or unique-local IPv6 address of an up interface, as the JDK lists it: with its {@code %ifname}. */
    private static Optional<InetAddress> scopedIpv6OfThisHost() throws Exception {
        for (NetworkInterface n : Collections.list(NetworkInterface.getNetworkInterfaces())) {
            if (!n.isUp() || n.isLoopback()) {
                continue;
            }
            for (InetAddress a : Collections.list(n.getInetAddresses())) {
                if (a instanceof Inet6Address && !a.isLinkLocalAddress() && a.getHostAddress().contains("%")) {
                    return Optional.of(a);
                }
            }
        }
        return Optional.empty();
    }

    @Test
    void shouldAdvertiseNoScopeWhenAnIpv6AddressOfAnInterfaceIsGivenWithIt() throws Exception {
        Optional<InetAddress> scoped = scopedIpv6OfThisHost();
        assumeTrue(scoped.isPresent(), "this host has no up interface with a global or unique-local IPv6 address");
        InetAddress a = BindAddress.resolve(scoped.get().getHostAddress(), KEY).orElseThrow();
        assertFalse(a.getHostAddress().contains("%"), a.getHostAddress());
        assertArrayEquals(scoped.get().getAddress(), a.getAddress());
    }

    @Test
    void shouldDropTheScopeWhenTheAddressCarriesOne() throws Exception {
        byte[] fd00 = InetAddress.getByName("fd00::2").getAddress();
        InetAddress scoped = Inet6Address.getByAddress(null, fd00, 3);
        assertTrue(scoped.getHostAddress().endsWith("%3"), scoped.getHostAddress());
        InetAddress plain = BindAddress.withoutScope(scoped, KEY, "fd00::2%3");
        assertEquals("fd00:0:0:0:0:0:0:2", plain.getHostAddress());
        String loopback = BindAddress.resolve("::1%1", KEY).orElseThrow().getHostAddress();
        assertFalse(loopback.contains("%"), loopback);
    }

    @Test
    void shouldRefuseNamingTheKeyWhenTheAddressIsIpv6LinkLocal() {
        TransportException e = assertThrows(TransportException.class, () -> BindAddress.resolve("fe80::1%1", KEY));
        assertTrue(e.getMessage().startsWith(KEY + "=fe80::1%1 is an IPv6 link-local address"), e.getMessage());
    }

    @Test
    void shouldRefuseWithoutALookupWhenAnOctetIsAbove255() {
        TransportException e = assertThrows(TransportException.class, () -> BindAddress.resolve("999.1.1.1", KEY));
        assertEquals(KEY + "=999.1.1.1 is not a valid IP address: octet 999 is above 255", e.getMessage());
        assertThrows(TransportException.class, () -> BindAddress.resolve("10.0.0.2561", KEY));
    }

    @Test
    void shouldSayAHostNameIsNotAcceptedWhenTheValueIsOne() {
        TransportException e = assertThrows(TransportException.class,
                () -> BindAddress.resolve("shuffle-7.example.org", KEY));
        assertTrue(e.getMessage().startsWith(KEY + "=shuffle-7.example.org matches no interface of this host (a host "
                + "name is not accepted; give an IP address or an interface name)"), e.getMessage());
    }

    @Test
    void shouldAcceptAnyOf127Slash8AndWarnNamingTheKeyWhenTheAddressIsLoopback() throws Exception {
        assumeTrue(System.getProperty("os.name").toLowerCase().startsWith("linux"), "not Linux: lo has no 127/8");
        PrintStream err = System.err;
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        InetAddress a;
        System.setErr(new PrintStream(captured, true, StandardCharsets.UTF_8));
        try {
            a = BindAddress.resolve("127.0.0.2", KEY).orElseThrow();
        } finally {
            System.setErr(err);
        }
        assertEquals("127.0.0.2", a.getHostAddress());
        String log = captured.toString(StandardCharsets.UTF_8);
        assertTrue(log.contains("WARN") && log.contains(KEY + " binds loopback 127.0.0.2: peers on other hosts "
                + "cannot reach it"), log);
        TransportException e = assertThrows(TransportException.class, () -> BindAddress.resolve("198.51.100.7", KEY));
        assertTrue(e.getMessage().startsWith(KEY + "=198.51.100.7 is not an address of this host"), e.getMessage());
    }
}
