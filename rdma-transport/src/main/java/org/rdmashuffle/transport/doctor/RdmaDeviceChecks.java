package org.rdmashuffle.transport.doctor;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;
import java.util.stream.Stream;
import org.rdmashuffle.conf.RdmaShuffleConf.Provider;

/**
 * The RDMA devices and their ports, from sysfs ({@code /sys/class/infiniband/<dev>}): one check per port with
 * its state, link layer (InfiniBand, RoCE, or iWARP, whose devices are of node type 4 and have no GID types),
 * the netdev it runs on, and its GIDs with their RoCE type. No device at all is a WARN under
 * {@code provider=auto} (executors will use tcp) and a FAIL under {@code provider=verbs}.
 */
final class RdmaDeviceChecks {
    static final String NO_DEVICE = "no RDMA device: executors will use tcp";
    private static final String ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000";
    private static final int MAX_GIDS = 256;

    private RdmaDeviceChecks() {
    }

    static List<Check> run(HostContext host) {
        Path root = host.paths().infiniband();
        List<Path> devices = list(root);
        if (devices.isEmpty()) {
            String where = Files.isDirectory(root) ? root + " is empty" : root + " does not exist";
            String fix = "load the NIC's RDMA driver (mlx5_ib, irdma, bnxt_re, ...) or a software one "
                    + "(rdma link add siw0 type siw netdev eth0), or set spark.shuffle.rdma.provider=tcp";
            return switch (host.provider()) {
                case TCP -> List.of(Check.skip("rdma devices", "provider=tcp: none needed (" + where + ")"));
                case VERBS -> List.of(Check.of("rdma devices", Check.Status.FAIL,
                        "no RDMA device: provider=verbs cannot start (" + where + ")", fix));
                default -> List.of(Check.of("rdma devices", Check.Status.WARN, NO_DEVICE + " (" + where + ")", fix));
            };
        }
        List<Check> out = new ArrayList<>();
        for (Path dev : devices) {
            List<Path> ports = list(dev.resolve("ports"));
            if (ports.isEmpty()) {
                out.add(Check.of("device " + name(dev), problem(host), "no ports in " + dev.resolve("ports"),
                        "reload the device's driver (rdma link show)"));
            }
            for (Path port : ports) {
                out.add(port(host, dev, port));
            }
        }
        return out;
    }

    private static Check port(HostContext host, Path dev, Path port) {
        String name = "port " + name(dev) + "/" + name(port);
        String state = read(port.resolve("state")).orElse("unknown");
        String phys = read(port.resolve("phys_state")).orElse("unknown");
        boolean iwarp = read(dev.resolve("node_type")).map(t -> t.startsWith("4")).orElse(false);
        String linkLayer = read(port.resolve("link_layer")).orElse("");
        String kind = iwarp ? "iWARP" : linkLayer.equals("InfiniBand") ? "InfiniBand"
                : linkLayer.equals("Ethernet") ? "RoCE" : "link layer " + (linkLayer.isEmpty() ? "unknown" : linkLayer);
        List<String> gids = new ArrayList<>();
        String netdev = null;
        for (int i = 0; i < MAX_GIDS; i++) {
            Optional<String> gid = read(port.resolve("gids").resolve(Integer.toString(i)));
            if (gid.isEmpty()) {
                break;
            }
            if (gid.get().equals(ZERO_GID)) {
                continue;
            }
            Optional<String> type = read(port.resolve("gid_attrs").resolve("types").resolve(Integer.toString(i)));
            gids.add(i + " " + gid.get() + type.map(t -> " " + t).orElse(""));
            if (netdev == null) {
                netdev = read(port.resolve("gid_attrs").resolve("ndevs").resolve(Integer.toString(i))).orElse(null);
            }
        }
        if (netdev == null) {
            netdev = list(dev.resolve("device").resolve("net")).stream().map(RdmaDeviceChecks::name).findFirst()
                    .or(() -> read(dev.resolve("parent"))).orElse(null);
        }
        String detail = stateName(state) + " (" + stateName(phys) + "), " + kind
                + (netdev == null ? "" : " on " + netdev) + ", GIDs: "
                + (gids.isEmpty() ? "none" : String.join(", ", gids));
        if (!state.contains("ACTIVE")) {
            return Check.of(name, problem(host), detail, "the port is not ACTIVE: ip link set "
                    + (netdev == null ? "<its netdev>" : netdev) + " up, check the cable and switch port"
                    + (kind.equals("InfiniBand") ? "; InfiniBand needs a subnet manager (opensm)" : ""));
        }
        if (gids.isEmpty() && !kind.equals("InfiniBand")) {
            return Check.of(name, problem(host), detail, "no GID: give " + (netdev == null ? "its netdev" : netdev)
                    + " an IP address (rdma_cm resolves peers by IP)");
        }
        if (kind.equals("RoCE") && gids.stream().noneMatch(g -> g.endsWith("RoCE v2"))) {
            return Check.of(name, Check.Status.WARN, detail, "no RoCE v2 GID: RoCE v1 does not cross an IP router; "
                    + "give the netdev an IP address or check the NIC's RoCE mode");
        }
        return Check.pass(name, detail);
    }

    private static Check.Status problem(HostContext host) {
        return host.provider() == Provider.TCP ? Check.Status.SKIP : host.verbsProblem();
    }

    /** {@code 4: ACTIVE} -> {@code ACTIVE}. */
    private static String stateName(String sysfs) {
        int colon = sysfs.indexOf(':');
        return colon < 0 ? sysfs : sysfs.substring(colon + 1).trim();
    }

    private static String name(Path p) {
        return p.getFileName().toString();
    }

    private static List<Path> list(Path dir) {
        try (Stream<Path> s = Files.list(dir)) {
            return s.sorted(Comparator.comparing(RdmaDeviceChecks::name, RdmaDeviceChecks::naturally)).toList();
        } catch (IOException e) {
            return List.of();
        }
    }

    /** Port 2 before port 10. */
    private static int naturally(String a, String b) {
        if (a.chars().allMatch(Character::isDigit) && b.chars().allMatch(Character::isDigit)
                && !a.isEmpty() && !b.isEmpty() && a.length() < 10 && b.length() < 10) {
            return Integer.compare(Integer.parseInt(a), Integer.parseInt(b));
        }
        return a.compareTo(b);
    }

    /** A sysfs attribute's first line, trimmed; empty when it cannot be read (absent, or EINVAL for unused GIDs). */
    static Optional<String> read(Path file) {
        try {
            String s = HostPaths.text(file).trim();
            int nl = s.indexOf('\n');
            return Optional.of(nl < 0 ? s : s.substring(0, nl).trim());
        } catch (IOException | RuntimeException e) {
            return Optional.empty();
        }
    }
}
