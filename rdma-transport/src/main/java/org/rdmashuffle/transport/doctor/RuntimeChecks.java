package org.rdmashuffle.transport.doctor;

import java.io.IOException;
import java.net.Inet4Address;
import java.net.InetAddress;
import java.net.NetworkInterface;
import java.net.SocketException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.conf.RdmaShuffleConf.Provider;
import org.rdmashuffle.conf.RdmaShuffleConf.VerbsApi;
import org.rdmashuffle.transport.BindAddress;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.TransportChoice;
import org.rdmashuffle.transport.TransportException;
import org.rdmashuffle.transport.verbs.VerbsApis;

/**
 * What this JVM and configuration make of the host: the verbs path the Java version allows, the bind address,
 * and whether the transport the configuration asks for opens.
 */
final class RuntimeChecks {
    private RuntimeChecks() {
    }

    /** The Java version against the verbs path it allows: java.lang.foreign from 22, DiSNI with libdisni before. */
    static Check java(RdmaShuffleConf conf) {
        String name = "java";
        int feature = Runtime.version().feature();
        String jvm = "Java " + Runtime.version() + " (" + System.getProperty("java.vm.vendor", "?") + ")";
        if (conf.provider() == Provider.TCP) {
            return Check.pass(name, jvm + ": provider=tcp needs nothing more");
        }
        VerbsApi api = conf.verbsApi();
        Optional<String> missing = VerbsApis.apiMissing(api);
        if (missing.isEmpty()) {
            boolean disni = api == VerbsApi.DISNI
                    || api == VerbsApi.AUTO && VerbsApis.apiMissing(VerbsApi.FFM).isPresent();
            String path = disni ? "DiSNI with libdisni on java.library.path" : "java.lang.foreign with rdma-core's libraries";
            return Check.pass(name, jvm + ": verbs through " + path);
        }
        String fix = feature >= 22 ? "install rdma-core (libibverbs and librdmacm) and start the JVM with "
                + "--enable-native-access=ALL-UNNAMED" : "run Java 22+ (java.lang.foreign), or build libdisni and pass "
                + "-Djava.library.path=<its dir> (executors: spark.executor.extraLibraryPath)";
        Check.Status status = conf.provider() == Provider.VERBS ? Check.Status.FAIL : Check.Status.WARN;
        return Check.of(name, status, jvm + ": no verbs path: " + missing.get(), fix);
    }

    /** The address a node would bind: {@code bind} when given, else the configuration's, else this host's. */
    static Check bind(String bind) {
        String name = "bind address";
        String key = RdmaShuffleConf.BIND_ADDRESS.name();
        if (bind.isBlank()) {
            Optional<InetAddress> local = localAddress(interfaces());
            if (local.isEmpty()) {
                return Check.of(name, Check.Status.WARN, key + " not set and this host has only loopback up: peers "
                        + "on other hosts cannot reach " + hostAddress(), "bring up the RDMA network's interface, "
                        + "or pass --bind with its address");
            }
            return Check.pass(name, key + " not set: executors bind their block manager's host (this host: "
                    + local.get().getHostAddress() + ")");
        }
        try {
            InetAddress a = BindAddress.resolve(bind, key).orElseThrow();
            if (a.isLoopbackAddress()) {
                return Check.of(name, Check.Status.WARN, key + "=" + bind + " -> " + a.getHostAddress()
                        + ": loopback, peers on other hosts cannot reach it", "bind the RDMA network's interface");
            }
            return Check.pass(name, key + "=" + bind + " -> " + a.getHostAddress());
        } catch (TransportException e) {
            return Check.of(name, Check.Status.FAIL, e.getMessage(), "set " + key
                    + " to an interface or address of this host (ip -brief address)");
        }
    }

    /** The address {@code bind} names, or this host's when it is blank; null when it names none. */
    static String bindHost(String bind) {
        if (bind.isBlank()) {
            return hostAddress();
        }
        try {
            return BindAddress.resolve(bind, RdmaShuffleConf.BIND_ADDRESS.name()).orElseThrow().getHostAddress();
        } catch (TransportException e) {
            return null;
        }
    }

    /** This host's address others reach it at ({@link #localAddress}), or loopback when it has none. */
    static String hostAddress() {
        return localAddress(interfaces()).orElse(InetAddress.getLoopbackAddress()).getHostAddress();
    }

    /** One network interface as {@link #localAddress} sees it. */
    record Interface(String name, boolean up, boolean loopback, List<InetAddress> addresses) {
    }

    /**
     * The address peers on other hosts would reach this host at, as Spark picks its own: the first address of an
     * up, non-loopback interface that is neither loopback nor link-local, an IPv4 one before any IPv6 one (which
     * loses its scope); empty when only loopback is up. Not {@code InetAddress.getLocalHost()}: the host name
     * often resolves to 127.0.1.1 or 127.0.0.1.
     */
    static Optional<InetAddress> localAddress(List<Interface> interfaces) {
        InetAddress v6 = null;
        for (Interface n : interfaces) {
            if (!n.up() || n.loopback()) {
                continue;
            }
            for (InetAddress a : n.addresses()) {
                if (a.isLoopbackAddress() || a.isLinkLocalAddress() || a.isAnyLocalAddress()) {
                    continue;
                }
                if (a instanceof Inet4Address) {
                    return Optional.of(a);
                }
                if (v6 == null) {
                    v6 = a;
                }
            }
        }
        if (v6 == null) {
            return Optional.empty();
        }
        try {
            return Optional.of(InetAddress.getByAddress(v6.getAddress()));
        } catch (java.net.UnknownHostException e) {
            throw new IllegalStateException("sixteen bytes are an IPv6 address", e);
        }
    }

    /** This host's interfaces, in the order the kernel lists them; none when they cannot be listed. */
    static List<Interface> interfaces() {
        List<Interface> out = new ArrayList<>();
        try {
            for (NetworkInterface n : Collections.list(NetworkInterface.getNetworkInterfaces())) {
                out.add(new Interface(n.getName(), n.isUp(), n.isLoopback(), Collections.list(n.getInetAddresses())));
            }
        } catch (SocketException e) {
            return List.of();
        }
        return out;
    }

    /** Opens a node as an executor would (on a free port) and closes it right away. */
    static Check transport(RdmaShuffleConf conf, String bind) {
        String name = "transport";
        Optional<String> unavailable = RdmaTransport.unavailable(conf);
        if (unavailable.isPresent()) {
            return Check.of(name, Check.Status.FAIL, unavailable.get(), "fix the checks above, or set "
                    + RdmaShuffleConf.PROVIDER.name() + "=auto or tcp");
        }
        String host = bindHost(bind);
        if (host == null) {
            return Check.skip(name, "no node opened: the bind address names nothing on this host");
        }
        RdmaShuffleConf anyPort = conf.with(Map.of(RdmaShuffleConf.PORT.name(), "0"));
        RdmaTransport.Opened opened;
        try {
            opened = RdmaTransport.openChosen(anyPort, new NodeOptions(host, host, ControlHandler.NONE, null));
        } catch (IOException | RuntimeException e) {
            return Check.of(name, Check.Status.FAIL, "provider=" + conf.provider().name().toLowerCase()
                    + " does not open on " + host + ": " + e.getMessage(), "fix what it names, or set "
                    + RdmaShuffleConf.PROVIDER.name() + "=auto or tcp");
        }
        try (RdmaNode node = opened.node()) {
            TransportChoice choice = opened.choice();
            String where = node.localAddress().toString();
            if (choice.fellBack()) {
                return Check.of(name, Check.Status.WARN, "opens " + choice.describe() + " at " + where,
                        "for verbs, fix what it names (or set " + RdmaShuffleConf.PROVIDER.name() + "=tcp to say so)");
            }
            return Check.pass(name, "opens " + choice.describe() + " at " + where);
        }
    }
}
