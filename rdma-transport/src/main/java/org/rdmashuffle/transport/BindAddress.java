package org.rdmashuffle.transport;

import java.net.Inet4Address;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.NetworkInterface;
import java.net.SocketException;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Resolves a {@code bindAddress} value (an IP address of this host, or an interface name) to the address a
 * node listens on and advertises. Never falls back: a name that matches no interface, an interface that is
 * down or has no address, or an address that is not on this host fails with an error naming the key the
 * user set ({@code spark.shuffle.rdma.bindAddress}, {@code mapreduce.shuffle.rdma.bindAddress}).
 */
public final class BindAddress {
    private static final Logger LOG = LoggerFactory.getLogger(BindAddress.class);
    /** Four dot-separated runs of digits: an IPv4 literal, or a value that is no address at all (999.1.1.1). */
    private static final Pattern IPV4 = Pattern.compile("\\d+(\\.\\d+){3}");
    /**
     * An IPv6 literal; it starts with a hex digit or a colon, so {@link InetAddress#getByName} parses it (or
     * refuses it) without a name service lookup.
     */
    private static final Pattern IPV6 = Pattern.compile("[0-9A-Fa-f:][0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(%[A-Za-z0-9_.-]+)?");
    private static final boolean LINUX = System.getProperty("os.name", "").toLowerCase(java.util.Locale.ROOT)
            .startsWith("linux");

    private BindAddress() {
    }

    /**
     * The address {@code value} names on this host, or empty when {@code value} is null or blank (the caller's
     * default applies). An IPv6 address comes without a scope, so its {@link InetAddress#getHostAddress()} is what
     * peers can resolve; a loopback one is returned after one WARN naming {@code key}.
     *
     * @param key the configuration key {@code value} came from, named in every error
     * @throws TransportException when {@code value} names no address or interface of this host
     */
    public static Optional<InetAddress> resolve(String value, String key) throws TransportException {
        if (value == null || value.isBlank()) {
            return Optional.empty();
        }
        String v = value.trim();
        InetAddress a = withoutScope(find(v, key), key, v);
        loopbackWarning(a, key).ifPresent(LOG::warn);
        return Optional.of(a);
    }

    private static InetAddress find(String v, String key) throws TransportException {
        try {
            if (IPV4.matcher(v).matches()) {
                return onThisHost(ipv4(v, key), key, v);
            }
            if (IPV6.matcher(v).matches()) {
                InetAddress a = InetAddress.getByName(v);   // an IPv6 literal: no name service lookup
                return onThisHost(withoutScope(a, key, v), key, v);
            }
            NetworkInterface nif = NetworkInterface.getByName(v);
            if (nif == null) {
                throw new TransportException(key + "=" + v + " matches no interface of this host (a host name is not "
                        + "accepted; give an IP address or an interface name); its interfaces: " + interfaces());
            }
            if (!nif.isUp()) {
                throw new TransportException(key + "=" + v + " names an interface that is down (ip link set " + v
                        + " up)");
            }
            return firstAddress(nif).orElseThrow(() -> new TransportException(key + "=" + v
                    + " names an interface with no IP address"));
        } catch (UnknownHostException e) {
            throw new TransportException(key + "=" + v + " is not a valid IP address: " + e.getMessage(), e);
        } catch (SocketException e) {
            throw new TransportException(key + "=" + v + ": cannot list this host's interfaces: " + e.getMessage(), e);
        }
    }

    /** {@code a} when an interface of this host has it, or it is loopback on Linux (where lo takes all of 127/8). */
    private static InetAddress onThisHost(InetAddress a, String key, String v) throws SocketException, TransportException {
        if (NetworkInterface.getByInetAddress(a) == null && !(LINUX && a.isLoopbackAddress())) {
            throw new TransportException(key + "=" + v + " is not an address of this host (its interfaces: "
                    + interfaces() + ")");
        }
        return a;
    }

    /**
     * The IPv4 address of four decimal octets, built without any lookup.
     *
     * @throws TransportException when an octet is above 255
     */
    static InetAddress ipv4(String v, String key) throws TransportException {
        String[] parts = v.split("\\.");
        byte[] octets = new byte[4];
        for (int i = 0; i < 4; i++) {
            int o = parts[i].length() > 3 ? 256 : Integer.parseInt(parts[i]);
            if (o > 255) {
                throw new TransportException(key + "=" + v + " is not a valid IP address: octet " + parts[i]
                        + " is above 255");
            }
            octets[i] = (byte) o;
        }
        try {
            return InetAddress.getByAddress(octets);
        } catch (UnknownHostException e) {
            throw new IllegalStateException("four octets are an IPv4 address", e);
        }
    }

    /**
     * {@code a} without an IPv6 scope ({@code fd00::2%net1} is {@code fd00::2}): a peer knows no interface of this
     * host by its name, so an advertised scope makes the address unresolvable there.
     *
     * @throws TransportException when {@code a} is link-local, which has no meaning without its scope
     */
    static InetAddress withoutScope(InetAddress a, String key, String v) throws TransportException {
        if (!(a instanceof Inet6Address)) {
            return a;
        }
        if (a.isLinkLocalAddress()) {
            throw new TransportException(key + "=" + v + " is an IPv6 link-local address (fe80::/10): peers cannot "
                    + "reach it without this host's interface scope; give a global or unique-local address");
        }
        try {
            return InetAddress.getByAddress(a.getAddress());
        } catch (UnknownHostException e) {
            throw new IllegalStateException("sixteen bytes are an IPv6 address", e);
        }
    }

    /** The WARN to log when {@code a} is loopback: fine for tests and local modes, unreachable from other hosts. */
    static Optional<String> loopbackWarning(InetAddress a, String key) {
        if (!a.isLoopbackAddress()) {
            return Optional.empty();
        }
        return Optional.of(key + " binds loopback " + a.getHostAddress() + ": peers on other hosts cannot reach "
                + "it (fine for tests and local mode only)");
    }

    /** The interface's first IPv4 address, else its first IPv6 one that is not link-local. */
    private static Optional<InetAddress> firstAddress(NetworkInterface nif) {
        InetAddress v6 = null;
        for (InetAddress a : Collections.list(nif.getInetAddresses())) {
            if (a instanceof Inet4Address) {
                return Optional.of(a);
            }
            if (v6 == null && a instanceof Inet6Address && !a.isLinkLocalAddress()) {
                v6 = a;
            }
        }
        return Optional.ofNullable(v6);
    }

    /** This host's interfaces with their addresses, for error messages: {@code eth0 10.0.0.5, lo 127.0.0.1}. */
    static String interfaces() {
        List<String> out = new ArrayList<>();
        try {
            for (NetworkInterface n : Collections.list(NetworkInterface.getNetworkInterfaces())) {
                StringBuilder b = new StringBuilder(n.getName());
                for (InetAddress a : Collections.list(n.getInetAddresses())) {
                    if (!a.isLinkLocalAddress()) {
                        String host = a.getHostAddress();
                        int scope = host.indexOf('%');
                        b.append(' ').append(scope < 0 ? host : host.substring(0, scope));
                    }
                }
                out.add(b.toString());
            }
        } catch (SocketException e) {
            return "unknown: " + e.getMessage();
        }
        Collections.sort(out);
        return String.join(", ", out);
    }
}
