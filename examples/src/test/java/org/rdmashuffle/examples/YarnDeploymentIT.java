package org.rdmashuffle.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Stream;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.ZipFile;
import org.apache.commons.lang3.exception.ExceptionUtils;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationReport;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.YarnApplicationState;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.spark.launcher.SparkAppHandle;
import org.apache.spark.launcher.SparkLauncher;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * rdma-shuffle deployed as users deploy it on YARN: a real YARN cluster in this JVM (Hadoop's
 * {@code MiniYARNCluster}: one ResourceManager, two NodeManagers), its configuration written to a
 * {@code HADOOP_CONF_DIR}, and Spark's own {@code spark-submit} (through {@link SparkLauncher}, from a
 * SPARK_HOME whose jars/ are Spark's with {@code spark-yarn}) submitting {@link DeployCheckJob} from the
 * packaged examples jar with {@code --master yarn}, in client and in cluster deploy mode, on two
 * executors of one core. Spark's jars come from the NodeManagers' disk ({@code spark.yarn.jars=local:…});
 * the plugin (the line's packaged {@code rdma-shuffle-spark-<line>-plugin.jar}) is in neither the
 * application jar nor Spark's jars, and reaches the containers through {@code --jars}, which YARN
 * localizes into each container's working directory. What each Spark line needs beyond that:
 * <ul>
 *   <li>4.0 and later (the examples module, 4.2): nothing. The driver and the executors build the
 *       shuffle manager through the application's class loader, which holds {@code --jars}.</li>
 *   <li>3.5 (examples/lines/3.5_2.12): {@code spark.executor.extraClassPath=<the plugin jar's file
 *       name>}, in client and in cluster mode. An executor builds its shuffle manager in
 *       {@code SparkEnv.create} through the system class loader, before it fetches the application's
 *       jars (changed by SPARK-45762 in 4.0); the bare name is the localized copy in the container's
 *       working directory. The driver needs nothing more: it builds the manager through the thread's
 *       context class loader, which holds {@code --jars} in client mode (spark-submit's loader) and in
 *       cluster mode (the ApplicationMaster's user class loader).</li>
 * </ul>
 * The line is read from the SPARK_HOME's spark-core jar.
 *
 * <p>Each run must end FINISHED for the launcher and SUCCEEDED for YARN, with every RDD and SQL
 * result equal to the driver's own computation, the shuffle manager in place (no fallback) on the
 * driver and both executors, and READs completed by every executor. On failure the message carries
 * the end of spark-submit's output and of every container's log; all of them stay under
 * {@code target/yarn-deploy} (per deploy mode: spark-submit's output, the job's results, the staging
 * directory; {@code yarn/}: the NodeManagers' local and log directories), emptied when the test starts.
 */
class YarnDeploymentIT {
    private static final String RDMA_MANAGER = "org.rdmashuffle.shuffle.RdmaShuffleManager";
    private static final int EXECUTORS = 2;
    /** How long one application may take from submission to its end before it is killed and the test fails. */
    private static final long APP_TIMEOUT_MS = 240_000;

    private static Path work;
    private static Path sparkHome;
    private static SparkLine line;
    private static Path hadoopConf;
    private static MiniYARNCluster yarn;
    private static YarnClient yarnClient;
    private static String previousTestData;

    @BeforeAll
    static void startYarn() throws Exception {
        Path builtSparkHome = Path.of(System.getProperty("rdma.deploy.sparkHome", "target/spark-home"));
        assumeTrue(Files.isDirectory(builtSparkHome.resolve("jars")),
                "SPARK_HOME with Spark's jars/ is missing (the build assembles it under examples/target at package)");
        try (Stream<Path> jars = Files.list(builtSparkHome.resolve("jars"))) {
            assumeTrue(jars.anyMatch(j -> j.getFileName().toString().startsWith("spark-yarn_")),
                    "spark-yarn is missing from " + builtSparkHome.resolve("jars"));
        }
        assumeTrue(new File("/bin/bash").canExecute() || new File("/usr/bin/bash").canExecute(),
                "bash is missing: NodeManagers launch containers with bash scripts");
        work = Path.of(System.getProperty("rdma.deploy.workDir", "target/yarn-deploy")).toAbsolutePath();
        deleteRecursively(work);
        Files.createDirectories(work);
        sparkHome = fakeSparkHome(builtSparkHome.toAbsolutePath().toRealPath());
        line = SparkLine.of(builtSparkHome.resolve("jars"));
        assertEquals(org.apache.spark.package$.MODULE$.SPARK_VERSION(), line.sparkVersion(),
                "the SPARK_HOME's Spark release differs from the test's own class path");

        YarnConfiguration conf = new YarnConfiguration();
        conf.set(YarnConfiguration.RM_HOSTNAME, "localhost");
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, 2048);
        conf.setInt(YarnConfiguration.NM_PMEM_MB, 4096);
        conf.setInt(YarnConfiguration.NM_VCORES, 4);
        conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
        conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
        // A full-ish disk must not mark the NodeManagers unhealthy (no containers would start).
        conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 100.0f);
        conf.setLong(YarnConfiguration.NM_MIN_PER_DISK_FREE_SPACE_MB, 0);
        // Keep containers' directories a while after they end, to diagnose a failure.
        conf.setInt(YarnConfiguration.DEBUG_NM_DELETE_DELAY_SEC, 600);
        // hadoop-client-minicluster has no capacity-scheduler.xml: one queue with everything.
        conf.set("yarn.scheduler.capacity.root.queues", "default");
        conf.setInt("yarn.scheduler.capacity.root.default.capacity", 100);
        conf.setInt("yarn.scheduler.capacity.root.default.maximum-capacity", 100);
        conf.setFloat("yarn.scheduler.capacity.root.default.user-limit-factor", 1);
        conf.set("yarn.scheduler.capacity.root.default.state", "RUNNING");
        conf.set("yarn.scheduler.capacity.root.default.acl_submit_applications", "*");
        conf.set("yarn.scheduler.capacity.root.default.acl_administer_queue", "*");
        conf.setFloat("yarn.scheduler.capacity.maximum-am-resource-percent", 0.5f);
        conf.setInt("yarn.scheduler.capacity.node-locality-delay", -1);

        // The NodeManagers' local and log directories: under the work directory too (Hadoop's test
        // utilities put them under test.build.data), so that each run starts clean.
        previousTestData = System.setProperty("test.build.data", work.resolve("yarn").toString());
        yarn = new MiniYARNCluster("rdma-shuffle-yarn", 2, 1, 1);
        try {
            yarn.init(conf);
            yarn.start();
        } catch (RuntimeException e) {
            assumeTrue(ExceptionUtils.indexOfThrowable(e, java.net.BindException.class) < 0,
                    "MiniYARNCluster cannot bind its ports on localhost: " + e);
            throw e;
        }
        // start() can return before the ResourceManager has put its real port into the configuration.
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (yarn.getConfig().get(YarnConfiguration.RM_ADDRESS).endsWith(":0")) {
            assertTrue(System.nanoTime() < deadline, "the ResourceManager's address was not set within 30 s");
            Thread.sleep(100);
        }
        assertTrue(yarn.waitForNodeManagersToConnect(60_000), "the NodeManagers did not register within 60 s");

        hadoopConf = Files.createDirectories(work.resolve("hadoop-conf"));
        try (OutputStream out = Files.newOutputStream(hadoopConf.resolve("yarn-site.xml"))) {
            yarn.getConfig().writeXml(out);
        }
        Configuration core = new Configuration(false);
        core.set("fs.defaultFS", "file:///");
        try (OutputStream out = Files.newOutputStream(hadoopConf.resolve("core-site.xml"))) {
            core.writeXml(out);
        }
        yarnClient = YarnClient.createYarnClient();
        yarnClient.init(yarn.getConfig());
        yarnClient.start();
    }

    @AfterAll
    static void stopYarn() {
        if (yarnClient != null) {
            yarnClient.stop();
        }
        if (yarn != null) {
            yarn.stop();
        }
        if (previousTestData == null) {
            System.clearProperty("test.build.data");
        } else {
            System.setProperty("test.build.data", previousTestData);
        }
    }

    @ParameterizedTest(name = "--deploy-mode {0}")
    @ValueSource(strings = {"client", "cluster"})
    @Timeout(360)
    void shouldReadAcrossExecutorsOnYarnInClientAndClusterDeployMode(String deployMode) throws Exception {
        Path dir = Files.createDirectories(work.resolve(deployMode));
        Path log = dir.resolve("spark-submit.log");
        Path result = dir.resolve("result.properties");
        String appJar = existing("rdma.deploy.appJar");
        String pluginJar = existing("rdma.deploy.pluginJar");
        String javaHome = System.getProperty("java.home");
        // The plugin reaches the driver and the executors through --jars (and, before 4.0, the executors'
        // class path: see below), never through the application jar or Spark's jars.
        assertFalse(containsManager(Path.of(appJar)), appJar + " holds the shuffle manager");
        try (Stream<Path> jars = Files.list(sparkHome.resolve("jars"))) {
            for (Path jar : (Iterable<Path>) jars::iterator) {
                assertFalse(containsManager(jar), jar + " in SPARK_HOME holds the shuffle manager");
            }
        }
        assertTrue(containsManager(Path.of(pluginJar)), pluginJar + " lacks the shuffle manager");

        Map<String, String> env = new HashMap<>();
        env.put("HADOOP_CONF_DIR", hadoopConf.toString());
        env.put("YARN_CONF_DIR", hadoopConf.toString());
        env.put("SPARK_HOME", sparkHome.toString());
        env.put("SPARK_CONF_DIR", sparkHome.resolve("conf").toString());
        env.put("SPARK_SCALA_VERSION", line.scalaVersion());
        env.put("SPARK_LOCAL_IP", "127.0.0.1");
        env.put("JAVA_HOME", javaHome);
        SparkLauncher launcher = new SparkLauncher(env)
                .setSparkHome(sparkHome.toString())
                .setMaster("yarn")
                .setDeployMode(deployMode)
                .setAppName("rdma-shuffle-yarn-" + deployMode)
                .setMainClass(DeployCheckJob.class.getName())
                .setAppResource(appJar)
                .addJar(pluginJar)
                .setConf("spark.shuffle.manager", RDMA_MANAGER)
                .setConf("spark.shuffle.rdma.provider", "tcp")
                .setConf("spark.shuffle.rdma.fallback", "never")
                .setConf("spark.executor.instances", Integer.toString(EXECUTORS))
                .setConf("spark.executor.cores", "1")
                .setConf("spark.executor.memory", "512m")
                // both NodeManagers are on this host: with Spark's default the executors would read each
                // other's blocks from disk (spark.shuffle.readHostLocalDisk) and none would be READ
                .setConf("spark.shuffle.readHostLocalDisk", "false")
                .setConf(SparkLauncher.DRIVER_MEMORY, "768m")
                .setConf("spark.yarn.am.memory", "512m")
                .setConf("spark.yarn.jars", "local:" + sparkHome.resolve("jars") + "/*")
                .setConf("spark.yarn.stagingDir", dir.resolve("staging").toUri().toString())
                .setConf("spark.yarn.maxAppAttempts", "1")
                .setConf("spark.yarn.appMasterEnv.JAVA_HOME", javaHome)
                .setConf("spark.executorEnv.JAVA_HOME", javaHome)
                .setConf("spark.yarn.appMasterEnv.SPARK_LOCAL_IP", "127.0.0.1")
                .setConf("spark.executorEnv.SPARK_LOCAL_IP", "127.0.0.1")
                .setConf("spark.ui.enabled", "false")
                .addAppArgs("--result", result.toString(), "--executors", Integer.toString(EXECUTORS))
                .redirectOutput(log.toFile())
                .redirectError();
        if (line.buildsManagerBeforeUserJars()) {
            // YARN localizes --jars into each container's working directory, the executor's current
            // directory: the jar's bare name puts it on the executor's own class path (Spark prepends
            // extraClassPath to the container's CLASSPATH), where SparkEnv.create looks.
            launcher.setConf(SparkLauncher.EXECUTOR_EXTRA_CLASSPATH, Path.of(pluginJar).getFileName().toString());
        }
        System.out.println(deployMode + ": Spark " + line.sparkVersion() + " (Scala " + line.scalaVersion()
                + "), plugin on the executors' class path: " + line.buildsManagerBeforeUserJars());

        long t0 = System.nanoTime();
        SparkAppHandle handle = launcher.startApplication();
        String appId = null;
        try {
            long deadline = t0 + APP_TIMEOUT_MS * 1_000_000L;
            while (!handle.getState().isFinal() && System.nanoTime() < deadline) {
                Thread.sleep(500);
            }
            appId = handle.getAppId();
            if (!handle.getState().isFinal()) {
                kill(handle, appId);
                fail("the application (" + appId + ", " + handle.getState() + ") did not end within "
                        + APP_TIMEOUT_MS / 1000 + " s; killed");
            }
            System.out.printf("%s: %s %s in %.1f s%n", deployMode, appId, handle.getState(),
                    (System.nanoTime() - t0) / 1e9);
            assertEquals(SparkAppHandle.State.FINISHED, handle.getState(), "launcher's final state");
            ApplicationReport report = finalReport(appId);
            assertEquals(FinalApplicationStatus.SUCCEEDED, report.getFinalApplicationStatus(),
                    "YARN's final status (" + report.getDiagnostics() + ")");

            assertTrue(Files.exists(result), "the job wrote no " + result);
            Properties r = new Properties();
            try (BufferedReader in = Files.newBufferedReader(result, StandardCharsets.UTF_8)) {
                r.load(in);
            }
            System.out.println(deployMode + ": " + r);
            assertEquals(deployMode, r.getProperty("deployMode"));
            assertEquals(RDMA_MANAGER, r.getProperty("driverShuffleManager"));
            assertEquals(r.getProperty("groupByKey.expected"), r.getProperty("groupByKey.actual"), "groupByKey");
            assertEquals(r.getProperty("sortByKey.expected"), r.getProperty("sortByKey.actual"), "sortByKey");
            assertEquals("true", r.getProperty("sortByKey.ordered"), "sortByKey order");
            assertEquals(r.getProperty("sqlGroupBy.expected"), r.getProperty("sqlGroupBy.actual"), "SQL groupBy");
            assertEquals(r.getProperty("sqlJoin.expected"), r.getProperty("sqlJoin.actual"), "SQL join");
            List<String> executors = Arrays.asList(r.getProperty("executors", "").split(","));
            assertEquals(EXECUTORS, executors.size(), "executors: " + executors);
            long served = 0;
            for (String e : executors) {
                String k = "executor." + e + ".";
                assertEquals(RDMA_MANAGER, r.getProperty(k + "shuffleManager"), "executor " + e + "'s shuffle manager");
                long reads = Long.parseLong(r.getProperty(k + "reads.rdd")) + Long.parseLong(r.getProperty(k + "reads.sql"));
                assertTrue(reads > 0, "executor " + e + " completed no READ");
                served += Long.parseLong(r.getProperty(k + "readsServed"));
            }
            assertTrue(Long.parseLong(r.getProperty("reads.rdd")) > 0, "no READ in the RDD shuffles");
            assertTrue(Long.parseLong(r.getProperty("reads.sql")) > 0, "no READ in the SQL shuffles");
            assertTrue(served > 0, "no executor served a READ");
            assertEquals("true", r.getProperty("ok"));
        } catch (AssertionError | RuntimeException e) {
            String diagnosis = diagnosis(log);
            System.out.println(diagnosis);
            throw new AssertionError(e.getMessage() + "\n" + diagnosis, e);
        } finally {
            if (!handle.getState().isFinal()) {
                kill(handle, appId);
            }
        }
    }

    /** The Spark release of a SPARK_HOME, read from its spark-core jar's name ({@code spark-core_2.12-3.5.9.jar}). */
    record SparkLine(String scalaVersion, String sparkVersion) {
        private static final Pattern SPARK_CORE = Pattern.compile("spark-core_(\\d+\\.\\d+)-(\\d+\\.\\d+\\.\\d+.*)\\.jar");

        static SparkLine of(Path jars) throws IOException {
            try (Stream<Path> files = Files.list(jars)) {
                String name = files.map(f -> f.getFileName().toString()).filter(n -> SPARK_CORE.matcher(n).matches())
                        .findFirst().orElseThrow(() -> new IllegalStateException("no spark-core jar in " + jars));
                Matcher m = SPARK_CORE.matcher(name);
                m.matches();
                return new SparkLine(m.group(1), m.group(2));
            }
        }

        /**
         * Before 4.0 an executor builds its ShuffleManager in SparkEnv.create through the system class
         * loader, before it fetches the application's jars (SPARK-45762 made it lazy, through the
         * application's class loader, in 4.0).
         */
        boolean buildsManagerBeforeUserJars() {
            return Integer.parseInt(sparkVersion.substring(0, sparkVersion.indexOf('.'))) < 4;
        }
    }

    private static boolean containsManager(Path jar) throws IOException {
        try (ZipFile zip = new ZipFile(jar.toFile())) {
            return zip.getEntry(RDMA_MANAGER.replace('.', '/') + ".class") != null;
        }
    }

    /** A system property naming a file the build made; fails the test when it is missing. */
    private static String existing(String property) {
        String path = System.getProperty(property);
        assertTrue(path != null && new File(path).isFile(), property + " names no file: " + path);
        return path;
    }

    /**
     * A SPARK_HOME for spark-submit: jars/ is the build's (a link), bin/ holds a minimal spark-submit
     * and spark-class (Spark's launcher builds the command), conf/ a log4j2 configuration.
     */
    private static Path fakeSparkHome(Path built) throws IOException {
        Path home = Files.createDirectories(work.resolve("spark-home"));
        Files.createSymbolicLink(home.resolve("jars"), built.resolve("jars"));
        Path bin = Files.createDirectories(home.resolve("bin"));
        for (String script : List.of("spark-submit", "spark-class")) {
            try (InputStream in = YarnDeploymentIT.class.getResourceAsStream("/spark-bin/" + script)) {
                assertTrue(in != null, "test resource spark-bin/" + script + " is missing");
                Files.copy(in, bin.resolve(script));
            }
            Files.setPosixFilePermissions(bin.resolve(script), PosixFilePermissions.fromString("rwxr-xr-x"));
        }
        Path conf = Files.createDirectories(home.resolve("conf"));
        Files.writeString(conf.resolve("log4j2.properties"), String.join("\n",
                "rootLogger.level = info",
                "rootLogger.appenderRef.stderr.ref = console",
                "appender.console.type = Console",
                "appender.console.name = console",
                "appender.console.target = SYSTEM_ERR",
                "appender.console.layout.type = PatternLayout",
                "appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex",
                "logger.jetty.name = org.sparkproject.jetty",
                "logger.jetty.level = warn",
                ""), StandardCharsets.UTF_8);
        return home;
    }

    /** Kills the application through the launcher and, when YARN knows it, through YARN. */
    private static void kill(SparkAppHandle handle, String appId) {
        handle.kill();
        if (appId != null) {
            try {
                yarnClient.killApplication(ApplicationId.fromString(appId));
            } catch (Exception e) {
                System.out.println("could not kill " + appId + " through YARN: " + e);
            }
        }
    }

    /** YARN's report once the application has ended (the launcher can see the end a moment earlier). */
    private static ApplicationReport finalReport(String appId) throws Exception {
        assertTrue(appId != null, "the launcher never learnt the application's id");
        ApplicationId id = ApplicationId.fromString(appId);
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (true) {
            ApplicationReport report = yarnClient.getApplicationReport(id);
            YarnApplicationState s = report.getYarnApplicationState();
            if (s == YarnApplicationState.FINISHED || s == YarnApplicationState.FAILED
                    || s == YarnApplicationState.KILLED) {
                return report;
            }
            assertTrue(System.nanoTime() < deadline, appId + " still " + s + " 60 s after the launcher saw it end");
            Thread.sleep(250);
        }
    }

    /** The end of spark-submit's output and of every container's logs. */
    private static String diagnosis(Path submitLog) {
        StringBuilder b = new StringBuilder("---- spark-submit output (" + submitLog + "), last lines:\n");
        b.append(tail(submitLog, 120));
        List<Path> logs = new ArrayList<>();
        if (yarn != null) {
            try (Stream<Path> files = Files.walk(yarn.getTestWorkDir().toPath())) {
                files.filter(f -> Files.isRegularFile(f) && f.getParent().getFileName().toString().startsWith("container_")
                                && (f.getFileName().toString().equals("stderr") || f.getFileName().toString().equals("stdout")))
                        .sorted().forEach(logs::add);
            } catch (IOException | UncheckedIOException e) {
                b.append("(cannot list container logs: ").append(e).append(")\n");
            }
        }
        for (Path f : logs) {
            b.append("---- ").append(f).append(", last lines:\n").append(tail(f, 60));
        }
        return b.toString();
    }

    private static String tail(Path file, int lines) {
        try {
            List<String> all = Files.readAllLines(file, StandardCharsets.UTF_8);
            return String.join("\n", all.subList(Math.max(0, all.size() - lines), all.size())) + "\n";
        } catch (IOException | UncheckedIOException e) {
            return "(unreadable: " + e + ")\n";
        }
    }

    private static void deleteRecursively(Path root) throws IOException {
        if (!Files.exists(root, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
            return;
        }
        try (Stream<Path> files = Files.walk(root)) {
            for (Path f : (Iterable<Path>) files.sorted((a, b) -> b.compareTo(a))::iterator) {
                Files.delete(f);
            }
        }
    }
}
