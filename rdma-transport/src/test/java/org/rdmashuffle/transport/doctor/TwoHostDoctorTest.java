package org.rdmashuffle.transport.doctor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code doctor} between two hosts: two network namespaces ({@code rdA}, {@code rdB}) joined by a veth pair, a
 * {@code doctor --serve} JVM in the first and a {@code doctor --peer} JVM in the second, over tcp. Needs root and
 * {@code ip}; skips saying so otherwise.
 */
@Timeout(120)
class TwoHostDoctorTest {
    private static final String SERVER_NS = "rdA";
    private static final String PEER_NS = "rdB";
    private static final String SERVER_IP = "10.213.7.1";
    private static final String PEER_IP = "10.213.7.2";
    private static final Pattern SERVING = Pattern.compile(
            "doctor: serving READ self-test at tcp://" + Pattern.quote(SERVER_IP) + ":(\\d+)");

    @TempDir
    Path tmp;

    /** Runs {@code command}; its exit status and output (stdout and stderr together). */
    private static Result exec(List<String> command, long timeoutSeconds) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        CompletableFuture<String> out = CompletableFuture.supplyAsync(() -> {
            try {
                return new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            } catch (IOException e) {
                return "(output unreadable: " + e + ")";
            }
        });
        if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
            p.destroyForcibly().waitFor();
            return new Result(-1, "timed out after " + timeoutSeconds + " s: " + out.getNow(""));
        }
        return new Result(p.exitValue(), out.join());
    }

    private record Result(int status, String output) {
    }

    private static Result ip(String... args) throws IOException, InterruptedException {
        List<String> c = new ArrayList<>(List.of("ip"));
        c.addAll(List.of(args));
        return exec(c, 20);
    }

    private static void must(Result r, String what) {
        assertEquals(0, r.status(), what + ": " + r.output());
    }

    private static List<String> doctorIn(String ns, String... args) {
        List<String> c = new ArrayList<>(List.of("ip", "netns", "exec", ns,
                Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-cp",
                System.getProperty("surefire.test.class.path", System.getProperty("java.class.path")),
                Doctor.class.getName()));
        c.addAll(List.of(args));
        return c;
    }

    private static void removeNamespaces() throws IOException, InterruptedException {
        ip("netns", "del", SERVER_NS);
        ip("netns", "del", PEER_NS);
    }

    @Test
    void shouldPassTheReadSelfTestWhenTwoNamespaceHostsTalkOverTcp() throws Exception {
        assumeTrue("root".equals(System.getProperty("user.name")), "needs root to create network namespaces");
        Result probe;
        try {
            probe = ip("netns", "list");
        } catch (IOException e) {
            probe = new Result(-1, e.toString());
        }
        assumeTrue(probe.status() == 0, "needs the ip command (iproute2): " + probe.output());
        removeNamespaces();
        Process server = null;
        try {
            Result add = ip("netns", "add", SERVER_NS);
            assumeTrue(add.status() == 0, "cannot create a network namespace here: " + add.output());
            must(ip("netns", "add", PEER_NS), "netns add " + PEER_NS);
            must(ip("link", "add", "rdvethA", "netns", SERVER_NS, "type", "veth", "peer", "name", "rdvethB",
                    "netns", PEER_NS), "veth pair");
            must(ip("-n", SERVER_NS, "addr", "add", SERVER_IP + "/24", "dev", "rdvethA"), "address A");
            must(ip("-n", PEER_NS, "addr", "add", PEER_IP + "/24", "dev", "rdvethB"), "address B");
            for (String ns : new String[] {SERVER_NS, PEER_NS}) {
                must(ip("-n", ns, "link", "set", "lo", "up"), "lo up in " + ns);
                must(ip("-n", ns, "link", "set", ns.equals(SERVER_NS) ? "rdvethA" : "rdvethB", "up"), "veth up");
            }

            Path serverErr = tmp.resolve("server.err");
            server = new ProcessBuilder(doctorIn(SERVER_NS, "--serve", "--serve-seconds", "60", "--provider", "tcp",
                    "--bind", SERVER_IP, "--outputs", "100")).redirectError(serverErr.toFile()).start();
            BufferedReader lines = new BufferedReader(new InputStreamReader(server.getInputStream(),
                    StandardCharsets.UTF_8));
            StringBuilder seen = new StringBuilder();
            String port = null;
            for (String line; port == null && (line = lines.readLine()) != null; ) {
                seen.append(line).append('\n');
                Matcher m = SERVING.matcher(line);
                if (m.matches()) {
                    port = m.group(1);
                }
            }
            assertTrue(port != null, "the server never said it serves: " + seen + Files.readString(serverErr));
            assertTrue(seen.toString().contains("PASS  bind address  spark.shuffle.rdma.bindAddress=" + SERVER_IP),
                    seen.toString());

            Result peer = exec(doctorIn(PEER_NS, "--provider", "tcp", "--bind", PEER_IP, "--outputs", "100",
                    "--peer", SERVER_IP + ":" + port, "--reads", "64"), 60);

            assertEquals(0, peer.status(), peer.output());
            assertTrue(peer.output().contains("PASS  self-test connect  from tcp (provider=tcp) to tcp://" + SERVER_IP
                    + ":" + port + ": region of 67108864 bytes"), peer.output());
            assertTrue(peer.output().contains("PASS  self-test READ  64 x 1048576 bytes, 67108864 bytes verified"),
                    peer.output());
        } finally {
            if (server != null) {
                server.destroy();
                if (!server.waitFor(10, TimeUnit.SECONDS)) {
                    server.destroyForcibly().waitFor();
                }
            }
            removeNamespaces();
        }
    }
}
