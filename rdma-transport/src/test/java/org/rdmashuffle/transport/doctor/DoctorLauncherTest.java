package org.rdmashuffle.transport.doctor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code Doctor.main} in a JVM of its own whose class path, like the plugin jar, has no SLF4J: it finds
 * {@code slf4j-api} in {@code $SPARK_HOME/jars}, or says how to run it.
 */
@Timeout(60)
class DoctorLauncherTest {
    @TempDir
    Path sparkHome;

    private static List<String> classPath() {
        return Arrays.asList(System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"))
                .split(File.pathSeparator));
    }

    private record Run(int status, String output) {
    }

    private static Run doctor(Map<String, String> env, String... args) throws Exception {
        String withoutSlf4j = classPath().stream().filter(e -> !e.contains("slf4j")).collect(
                Collectors.joining(File.pathSeparator));
        List<String> command = new java.util.ArrayList<>(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-cp", withoutSlf4j,
                Doctor.class.getName()));
        command.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true);
        pb.environment().remove("SPARK_HOME");
        pb.environment().remove("HADOOP_HOME");
        pb.environment().putAll(env);
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(30, TimeUnit.SECONDS), out);
        return new Run(p.exitValue(), out);
    }

    @Test
    void shouldTakeSlf4jFromSparkHomeWhenTheClassPathHasNone() throws Exception {
        Path api = classPath().stream().filter(e -> e.matches(".*slf4j-api-[0-9.]+\\.jar")).map(Path::of)
                .findFirst().orElseThrow(() -> new AssertionError("no slf4j-api on the test class path"));
        Files.createDirectories(sparkHome.resolve("jars"));
        Files.copy(api, sparkHome.resolve("jars").resolve(api.getFileName()));

        Run r = doctor(Map.of("SPARK_HOME", sparkHome.toString()), "--provider", "tcp", "--bind", "127.0.0.1",
                "--outputs", "100");

        assertEquals(0, r.status(), r.output());
        assertTrue(r.output().contains("PASS  transport  opens tcp (provider=tcp) at tcp://127.0.0.1:"), r.output());
    }

    @Test
    void shouldSayHowToRunItAndExitTwoWhenNoSlf4jIsFound() throws Exception {
        Run r = doctor(Map.of(), "--provider", "tcp");

        assertEquals(2, r.status(), r.output());
        assertTrue(r.output().startsWith("doctor: SLF4J is not on the class path"), r.output());
        assertTrue(r.output().contains("$SPARK_HOME/jars/*"), r.output());
        Run bad = doctor(Map.of(), "--provider", "rdma");
        assertEquals(2, bad.status(), bad.output());
        assertTrue(bad.output().startsWith("doctor: invalid rdma-shuffle configuration")
                && bad.output().contains("spark.shuffle.rdma.provider='rdma'")
                && bad.output().contains("usage: java -cp <plugin jar>"), bad.output());
    }
}
