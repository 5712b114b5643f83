package org.rdmashuffle.transport.doctor;

import java.io.IOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
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
            return Check.pass(name, key + " not set: executors bind their block manager's host (this host: "
                    + hostAddress() + ")");
        }
        try {
            InetAddress a = BindAddress.resolve(bind, key).orElseThrow();
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

    /** This host's address as its name resolves, or loopback when it does not. */
    static String hostAddress() {
        try {
            return InetAddress.getLocalHost().getHostAddress();
        } catch (UnknownHostException e) {
            return InetAddress.getLoopbackAddress().getHostAddress();
        }
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
