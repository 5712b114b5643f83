package org.rdmashuffle.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.File;
import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@code spark.shuffle.rdma.bindAddress} on two "hosts" (network namespaces rbA and rbB), each with two veth
 * links: {@code bm0} (10.211.1.0/24) carries Spark — the standalone Master, both Workers, the driver, the block
 * managers (SPARK_LOCAL_IP and spark.driver.host are its addresses) — and {@code rdma0} (10.211.2.0/24) is the
 * link the shuffle is bound to, named by its interface name, the same on both hosts, so that one setting
 * serves every executor. {@link DeployCheckJob} (RDD and SQL shuffles, every result checked) runs on one
 * executor per host with provider=tcp and fallback=never.
 *
 * <p>What proves the binding: each executor advertised (and logged) an address on rdma0; on bm0, an HTB class
 * that the u32 classifier fills with every IPv4 TCP packet to or from the shuffle's ports (spark.shuffle.rdma.port
 * fixed, 7424..7439) sent 0 bytes, on both hosts; and rdma0's interface counters (and the same class there)
 * carried at least the bytes the executors READ. Needs root, {@code ip} and {@code tc} (skips otherwise); takes
 * about a minute. Processes it started are killed and both namespaces deleted after, also on failure.
 */
class TwoLinkBindIT {
    private static final String NS_A = "rbA";
    private static final String NS_B = "rbB";
    private static final String BM = "bm0";
    private static final String RDMA = "rdma0";
    private static final String A1 = "10.211.1.1";
    private static final String B1 = "10.211.1.2";
    private static final String A2 = "10.211.2.1";
    private static final String B2 = "10.211.2.2";
    /** spark.shuffle.rdma.port; the counting class takes 7424..7439 (mask 0xfff0) in case of a retry. */
    private static final int PORT = 7424;
    private static final String[] OPENS = {"--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
        "--add-opens=java.base/java.io=ALL-UNNAMED"};

    private static final List<Process> started = new ArrayList<>();
    private static boolean namespacesMade;
    private static Path work;
    private static Path sparkHome;

    @BeforeAll
    static void checkMachine() throws Exception {
        assumeTrue("root".equals(System.getProperty("user.name")), "needs root (network namespaces); runs as "
                + System.getProperty("user.name"));
        assumeTrue(onPath("ip") && onPath("tc"), "needs iproute2's ip and tc");
        sparkHome = Path.of(System.getProperty("rdma.deploy.sparkHome", "target/spark-home")).toAbsolutePath();
        assumeTrue(Files.isDirectory(sparkHome.resolve("jars")), "SPARK_HOME with Spark's jars/ is missing (package "
                + "assembles it under examples/target)");
        for (String ns : List.of(NS_A, NS_B)) {
            assumeTrue(!run("ip", "netns", "list").contains(ns + " ") && !run("ip", "netns", "list").contains(ns + "\n"),
                    "namespace " + ns + " exists already (ip netns del " + ns + ")");
        }
        work = Path.of(System.getProperty("rdma.deploy.workDir", "target/yarn-deploy")).toAbsolutePath()
                .resolveSibling("two-link");
        deleteRecursively(work);
        Files.createDirectories(work);
    }

    @AfterAll
    static void tearDown() throws Exception {
        for (Process p : started) {
            p.destroy();
        }
        for (Process p : started) {
            if (!p.waitFor(10, TimeUnit.SECONDS)) {
                p.destroyForcibly();
            }
        }
        if (namespacesMade) {
            for (String ns : List.of(NS_A, NS_B)) {
                // Executors the Workers started and did not stop: ours, found by the namespace they run in.
                for (String pid : run("ip", "netns", "pids", ns).trim().split("\\s+")) {
                    if (!pid.isEmpty()) {
                        run("kill", "-9", pid);
                    }
                }
                run("ip", "netns", "del", ns);
            }
        }
    }

    @Test
    @Timeout(300)
    void shouldCarryEveryShuffleByteOnBoundLinkWhenBindAddressNamesSecondInterface() throws Exception {
        String appJar = existing("rdma.deploy.appJar");
        String pluginJar = existing("rdma.deploy.pluginJar");
        makeHosts();
        long[] rdmaBefore = {linkBytes(NS_A, RDMA), linkBytes(NS_B, RDMA)};

        start(NS_A, A1, "master", "org.apache.spark.deploy.master.Master", "--host", A1, "--port", "7077",
                "--webui-port", "8080");
        start(NS_A, A1, "workerA", "org.apache.spark.deploy.worker.Worker", "--host", A1, "--cores", "1", "--memory",
                "1536m", "--work-dir", work.resolve("work-A").toString(), "--webui-port", "8081", "spark://" + A1 + ":7077");
        start(NS_B, B1, "workerB", "org.apache.spark.deploy.worker.Worker", "--host", B1, "--cores", "1", "--memory",
                "1536m", "--work-dir", work.resolve("work-B").toString(), "--webui-port", "8081", "spark://" + A1 + ":7077");
        Path result = work.resolve("result.properties");
        Process driver = start(NS_A, A1, "driver", "org.apache.spark.deploy.SparkSubmit",
                "--master", "spark://" + A1 + ":7077", "--class", DeployCheckJob.class.getName(),
                "--conf", "spark.driver.host=" + A1,
                "--conf", "spark.shuffle.manager=org.rdmashuffle.shuffle.RdmaShuffleManager",
                "--conf", "spark.shuffle.rdma.provider=tcp",
                "--conf", "spark.shuffle.rdma.fallback=never",
                "--conf", "spark.shuffle.rdma.bindAddress=" + RDMA,
                "--conf", "spark.shuffle.rdma.port=" + PORT,
                "--conf", "spark.executor.memory=1g",
                "--conf", "spark.cores.max=2",
                "--conf", "spark.executor.extraClassPath=" + pluginJar,
                "--jars", pluginJar, appJar,
                "--result", result.toString(), "--records", "300000", "--executors", "2");
        assertTrue(driver.waitFor(240, TimeUnit.SECONDS), "the job did not end within 240 s; see " + work);
        assertEquals(0, driver.exitValue(), "the job failed; see " + work.resolve("driver.log"));

        Properties r = new Properties();
        try (Reader in = Files.newBufferedReader(result, StandardCharsets.UTF_8)) {
            r.load(in);
        }
        assertEquals("true", r.getProperty("ok"), "a result was wrong: " + r);
        long bytesRead = 0;
        String[] executors = r.getProperty("executors").split(",");
        assertEquals(2, executors.length, "executors: " + r);
        for (String id : executors) {
            assertEquals("org.rdmashuffle.shuffle.RdmaShuffleManager", r.getProperty("executor." + id + ".shuffleManager"));
            assertTrue(r.getProperty("executor." + id + ".host").startsWith("10.211.1."),
                    "block manager of executor " + id + " is not on " + BM + ": " + r);
            bytesRead += Long.parseLong(r.getProperty("executor." + id + ".bytesRead"));
        }
        assertTrue(bytesRead >= 16L << 20, "the executors READ only " + bytesRead + " bytes");

        // Measured first, then printed, then asserted: a failure still shows every number.
        List<String> serving = servingLines();
        long rdmaCarried = (linkBytes(NS_A, RDMA) - rdmaBefore[0]) + (linkBytes(NS_B, RDMA) - rdmaBefore[1]);
        long shuffleOnRdma = shufflePortBytes(NS_A, RDMA) + shufflePortBytes(NS_B, RDMA);
        long shuffleOnBmA = shufflePortBytes(NS_A, BM);
        long shuffleOnBmB = shufflePortBytes(NS_B, BM);
        System.out.printf("two-link: %d bytes READ; %s carried %d (shuffle ports %d); %s shuffle ports %d + %d; %s%n",
                bytesRead, RDMA, rdmaCarried, shuffleOnRdma, BM, shuffleOnBmA, shuffleOnBmB, serving);

        // Each executor's node listens on, and advertised, its host's rdma0 address.
        assertEquals(2, serving.size(), "executors' 'serving on' lines: " + serving);
        assertTrue(serving.stream().anyMatch(l -> l.contains("tcp://" + A2 + ":"))
                && serving.stream().anyMatch(l -> l.contains("tcp://" + B2 + ":")), "not on " + RDMA + ": " + serving);
        assertTrue(rdmaCarried >= bytesRead, RDMA + " carried " + rdmaCarried + " bytes for " + bytesRead
                + " bytes READ");
        assertTrue(shuffleOnRdma >= bytesRead, "the shuffle-port class on " + RDMA + " counted " + shuffleOnRdma
                + " bytes for " + bytesRead + " bytes READ (is the counter counting?)");
        assertEquals(0, shuffleOnBmA, "shuffle bytes sent on " + BM + " by " + NS_A);
        assertEquals(0, shuffleOnBmB, "shuffle bytes sent on " + BM + " by " + NS_B);
    }

    /** Both namespaces, both links, each end's egress counted for the shuffle's ports (HTB class 1:10). */
    private static void makeHosts() throws IOException, InterruptedException {
        namespacesMade = true;
        must("ip", "netns", "add", NS_A);
        must("ip", "netns", "add", NS_B);
        for (String[] link : new String[][] {{BM, A1, B1}, {RDMA, A2, B2}}) {
            must("ip", "link", "add", link[0], "netns", NS_A, "type", "veth", "peer", "name", link[0], "netns", NS_B);
            must("ip", "-n", NS_A, "addr", "add", link[1] + "/24", "dev", link[0]);
            must("ip", "-n", NS_B, "addr", "add", link[2] + "/24", "dev", link[0]);
            for (String ns : List.of(NS_A, NS_B)) {
                must("ip", "-n", ns, "link", "set", link[0], "up");
                must("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", link[0], "root", "handle", "1:", "htb",
                        "default", "20", "r2q", "100000");
                must("ip", "netns", "exec", ns, "tc", "class", "add", "dev", link[0], "parent", "1:", "classid", "1:10",
                        "htb", "rate", "100gbit");
                must("ip", "netns", "exec", ns, "tc", "class", "add", "dev", link[0], "parent", "1:", "classid", "1:20",
                        "htb", "rate", "100gbit");
                for (String end : List.of("sport", "dport")) {
                    must("ip", "netns", "exec", ns, "tc", "filter", "add", "dev", link[0], "parent", "1:", "protocol",
                            "ip", "prio", "1", "u32", "match", "ip", "protocol", "6", "0xff", "match", "ip", end,
                            Integer.toString(PORT), "0xfff0", "flowid", "1:10");
                }
            }
        }
        for (String ns : List.of(NS_A, NS_B)) {
            must("ip", "-n", ns, "link", "set", "lo", "up");
        }
    }

    /** Bytes the namespace's end of {@code dev} sent (both ends' together: what the link carried, once). */
    private static long linkBytes(String ns, String dev) throws IOException, InterruptedException {
        return Long.parseLong(must("ip", "netns", "exec", ns, "cat", "/sys/class/net/" + dev + "/statistics/tx_bytes")
                .trim());
    }

    /** Bytes the namespace sent on {@code dev} to or from the shuffle's ports (HTB class 1:10). */
    private static long shufflePortBytes(String ns, String dev) throws IOException, InterruptedException {
        String out = must("ip", "netns", "exec", ns, "tc", "-s", "class", "show", "dev", dev, "classid", "1:10");
        Matcher m = Pattern.compile("Sent (\\d+) bytes").matcher(out);
        assertTrue(m.find(), "no class 1:10 on " + dev + " in " + ns + ": " + out);
        return Long.parseLong(m.group(1));
    }

    /** The executors' "serving on" lines from their stderr under the Workers' work directories. */
    private static List<String> servingLines() throws IOException {
        List<String> lines = new ArrayList<>();
        for (String w : List.of("work-A", "work-B")) {
            try (Stream<Path> files = Files.walk(work.resolve(w))) {
                for (Path f : (Iterable<Path>) files.filter(p -> p.getFileName().toString().equals("stderr"))::iterator) {
                    for (String l : Files.readAllLines(f, StandardCharsets.UTF_8)) {
                        if (l.contains("rdma-shuffle executor") && l.contains("serving on")) {
                            lines.add(l);
                        }
                    }
                }
            }
        }
        return lines;
    }

    private static Process start(String ns, String localIp, String log, String mainClass, String... args)
            throws IOException {
        List<String> cmd = new ArrayList<>(List.of("ip", "netns", "exec", ns, "env", "SPARK_LOCAL_IP=" + localIp,
                "SPARK_HOME=" + sparkHome, "SPARK_SCALA_VERSION=2.13", "JAVA_HOME=" + System.getProperty("java.home"),
                "SPARK_LOCAL_DIRS=" + work.resolve("local-" + log),
                Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-Xmx512m"));
        cmd.addAll(List.of(OPENS));
        cmd.addAll(List.of("-cp", sparkHome.resolve("jars") + File.separator + "*", mainClass));
        cmd.addAll(List.of(args));
        if (mainClass.endsWith("SparkSubmit")) {
            // The driver's own class path gets the plugin and the application (spark-submit's loader has them too).
            int cp = cmd.indexOf("-cp") + 1;
            cmd.set(cp, existing("rdma.deploy.pluginJar") + File.pathSeparator + existing("rdma.deploy.appJar")
                    + File.pathSeparator + cmd.get(cp));
        }
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(work.resolve(log + ".log").toFile()).start();
        started.add(p);
        return p;
    }

    private static String existing(String property) {
        String v = System.getProperty(property);
        assumeTrue(v != null && Files.isRegularFile(Path.of(v)), property + " does not name a built jar: " + v);
        return v;
    }

    private static boolean onPath(String tool) throws IOException, InterruptedException {
        return new ProcessBuilder("sh", "-c", "command -v " + tool).start().waitFor() == 0;
    }

    private static String must(String... cmd) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, p.waitFor(), String.join(" ", cmd) + ": " + out);
        return out;
    }

    private static String run(String... cmd) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        p.waitFor();
        return out;
    }

    private static void deleteRecursively(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : (Iterable<Path>) s.sorted(java.util.Comparator.reverseOrder())::iterator) {
                Files.delete(p);
            }
        }
    }
}
