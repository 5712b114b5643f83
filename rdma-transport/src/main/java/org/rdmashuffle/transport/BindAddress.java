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

/**
 * Resolves a {@code bindAddress} value (an IP address of this host, or an interface name) to the address a
 * node listens on and advertises. Never falls back: a name that matches no interface, an interface that is
 * down or has no address, or an address that is not on this host fails with an error naming the key the
 * user set ({@code spark.shuffle.rdma.bindAddress}, {@code mapreduce.shuffle.rdma.bindAddress}).
 */
public final class BindAddress {
    private static final Pattern IPV4 = Pattern.compile("\\d{1,3}(\\.\\d{1,3}){3}");
    private static final Pattern IPV6 = Pattern.compile("[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(%[A-Za-z0-9_.-]+)?");

    private BindAddress() {
    }

    /**
     * The address {@code value} names on this host, or empty when {@code value} is null or blank (the caller's
     * default applies).
     *
     * @param key the configuration key {@code value} came from, named in every error
     * @throws TransportException when {@code value} names no address or interface of this host
     */
    public static Optional<InetAddress> resolve(String value, String key) throws TransportException {
        if (value == null || value.isBlank()) {
            return Optional.empty();
        }
        String v = value.trim();
        try {
            if (isLiteral(v)) {
                InetAddress a = InetAddress.getByName(v);   // a literal: no name service lookup
                if (!a.isLoopbackAddress() && NetworkInterface.getByInetAddress(a) == null) {
                    throw new TransportException(key + "=" + v + " is not an address of this host (its interfaces: "
                            + interfaces() + ")");
                }
                return Optional.of(a);
            }
            NetworkInterface nif = NetworkInterface.getByName(v);
            if (nif == null) {
                throw new TransportException(key + "=" + v + " matches no interface of this host (its interfaces: "
                        + interfaces() + ")");
            }
            if (!nif.isUp()) {
                throw new TransportException(key + "=" + v + " names an interface that is down (ip link set " + v
                        + " up)");
            }
            return Optional.of(firstAddress(nif).orElseThrow(() -> new TransportException(key + "=" + v
                    + " names an interface with no IP address")));
        } catch (UnknownHostException e) {
            throw new TransportException(key + "=" + v + " is not a valid IP address: " + e.getMessage(), e);
        } catch (SocketException e) {
            throw new TransportException(key + "=" + v + ": cannot list this host's interfaces: " + e.getMessage(), e);
        }
    }

    static boolean isLiteral(String v) {
        return IPV4.matcher(v).matches() || IPV6.matcher(v).matches();
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
                        b.append(' ').append(a.getHostAddress());
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
