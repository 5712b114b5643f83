package org.rdmashuffle.transport.tcp;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.HashMap;
import java.util.Map;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The three processes of {@code benchmarks/attack/run.sh}, each run in a network namespace of its
 * own, so the attacker and the honest peer have different source addresses:
 *
 * <pre>
 *   server bind=IP auth=yes|no dir=DIR            a tcp node (default limits) serving a 4 MiB region;
 *                                                 writes DIR/server.desc and, every 500 ms, DIR/server.stats
 *   attack scenario=8|9|10|11 target=IP:PORT sources=IP[,IP...]
 *                                                 runs one attack of issue 24 until killed; prints its state
 *   honest bind=IP target=IP:PORT auth=yes|no dir=DIR
 *                                                 a tcp node with default connect settings (3 retries)
 *                                                 connects and READs 1 MiB five times, byte for byte
 * </pre>
 *
 * Authentication uses one fixed test secret; the attacker of scenario 10 holds it (an insider), the
 * one of scenario 8 does not.
 */
public final class AttackHarness {
    private static final byte[] SECRET = "attack-harness-secret".getBytes(StandardCharsets.UTF_8);
    private static final int REGION_BYTES = 4 << 20;
    private static final long CONTENT_SEED = 24;

    private AttackHarness() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: AttackHarness server|attack|honest key=value...");
            System.exit(2);
        }
        Map<String, String> a = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            a.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        switch (args[0]) {
            case "server" -> server(a);
            case "attack" -> attack(a);
            case "honest" -> System.exit(honest(a) ? 0 : 1);
            default -> {
                System.err.println("unknown role " + args[0]);
                System.exit(2);
            }
        }
    }

    private static RdmaShuffleConf conf() {
        return new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp"));
    }

    private static byte[] secret(Map<String, String> a) {
        return "yes".equals(a.get("auth")) ? SECRET : null;
    }

    private static void server(Map<String, String> a) throws Exception {
        String bind = a.get("bind");
        Path dir = Path.of(a.get("dir"));
        NodeOptions options = new NodeOptions(bind, bind, ControlHandler.NONE, secret(a));
        ByteBuffer content = TcpAttacks.content(CONTENT_SEED, REGION_BYTES);
        try (TcpNode node = new TcpNode(conf(), options)) {
            MemoryRegion region = node.register(content, RegionAccess.REMOTE_READ);
            RegionDescriptor d = region.descriptor();
            writeAtomically(dir.resolve("server.desc"), node.localAddress().port() + " " + d.rkey() + " "
                    + d.address() + " " + d.length() + "\n");
            for (;;) {
                writeAtomically(dir.resolve("server.stats"), "refused=" + node.connectionsRefused()
                        + " refused_per_address=" + refusedPerAddress(node) + " closed_at_limit="
                        + node.connectionsClosedByLimit() + " connections_now=" + node.servedConnections()
                        + " reads_served=" + node.stats().readsServed() + " failure=" + node.failure() + "\n");
                Thread.sleep(500);
            }
        }
    }

    /** The per-address refusals, or "n/a" on a responder that has no such cap (a run against the old one). */
    private static String refusedPerAddress(TcpNode node) {
        try {
            return Long.toString(node.connectionsRefusedPerAddress());
        } catch (LinkageError old) {
            return "n/a";
        }
    }

    private static void writeAtomically(Path file, String text) throws IOException {
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        Files.writeString(tmp, text);
        Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    private static InetSocketAddress target(Map<String, String> a) {
        String t = a.get("target");
        int colon = t.lastIndexOf(':');
        return new InetSocketAddress(t.substring(0, colon), Integer.parseInt(t.substring(colon + 1)));
    }

    private static void attack(Map<String, String> a) throws Exception {
        InetSocketAddress target = target(a);
        String[] names = a.get("sources").split(",");
        InetAddress[] sources = new InetAddress[names.length];
        for (int i = 0; i < names.length; i++) {
            sources[i] = InetAddress.getByName(names[i]);
        }
        String scenario = a.get("scenario");
        switch (scenario) {
            case "8" -> {
                // 300 sockets without the secret, refused and held open; every 5 s (before a9d943f's
                // responder would let them go at its connectTimeout of 10 s) closed and opened again at once.
                TcpAttacks.RefusedHandshakes held = new TcpAttacks.RefusedHandshakes(target, sources, 300);
                status("ready " + held);
                for (;;) {
                    Thread.sleep(5000);
                    held.close();
                    held = new TcpAttacks.RefusedHandshakes(target, sources, 300);
                    status("renewed " + held);
                }
            }
            case "9" -> {
                try (TcpAttacks.RefusedFlood flood = new TcpAttacks.RefusedFlood(target, sources, 4, false);
                     TcpAttacks.RefusedFlood trickle = new TcpAttacks.RefusedFlood(target, sources, 1, true)) {
                    // Ready once the flood's senders were refused; its state every second either way (a
                    // responder the flood holds may never refuse the trickler, or even all four senders).
                    boolean ready = false;
                    for (long t = 0; ; t += 50) {
                        if (!ready && flood.refused.get() >= 4) {
                            ready = true;
                            status("ready flood: " + flood + "; trickle: " + trickle);
                        } else if (t % 1000 == 0) {
                            status("flood: " + flood + "; trickle: " + trickle);
                        }
                        Thread.sleep(50);
                    }
                }
            }
            case "10" -> {
                try (TcpAttacks.KeepAliveFlood flood = new TcpAttacks.KeepAliveFlood(target, sources, 2, SECRET)) {
                    while (flood.replyBytes.get() < (4 << 20)) {
                        Thread.sleep(50);
                    }
                    status("ready " + flood);
                    for (;;) {
                        Thread.sleep(1000);
                        status(flood.toString());
                    }
                }
            }
            case "11" -> {
                try (TcpAttacks.IdleHandshaken idle = new TcpAttacks.IdleHandshaken(target, sources, 1100, null)) {
                    status("ready " + idle);
                    for (;;) {
                        Thread.sleep(1000);
                    }
                }
            }
            default -> throw new IllegalArgumentException("unknown scenario " + scenario);
        }
    }

    private static void status(String s) {
        System.out.println("ATTACK " + s);
        System.out.flush();
    }

    private static boolean honest(Map<String, String> a) throws Exception {
        Path dir = Path.of(a.get("dir"));
        String[] desc = Files.readString(dir.resolve("server.desc")).trim().split(" ");
        InetSocketAddress target = target(a);
        NodeAddress server = new NodeAddress(target.getHostString(), target.getPort(), TcpNode.PROVIDER);
        RegionDescriptor d = new RegionDescriptor(Long.parseLong(desc[2]), Long.parseLong(desc[3]),
                Integer.parseInt(desc[1]));
        String bind = a.get("bind");
        NodeOptions options = new NodeOptions(bind, bind, ControlHandler.NONE, secret(a));
        ByteBuffer expected = TcpAttacks.content(CONTENT_SEED, REGION_BYTES);
        try {
            TcpAttacks.HonestResult r = TcpAttacks.honestRead(conf(), options, server, d, expected, 12_345, 1 << 20, 5,
                    30_000);
            boolean fast = r.slowestReadMs() <= 2000;
            System.out.println("HONEST " + (fast ? "PASS" : "FAIL") + " connect_ms=" + r.connectMs()
                    + " slowest_read_ms=" + r.slowestReadMs() + " total_ms=" + r.totalMs()
                    + (fast ? "" : " (a READ took more than 2 s)"));
            return fast;
        } catch (Exception e) {
            System.out.println("HONEST FAIL " + e);
            return false;
        }
    }
}
