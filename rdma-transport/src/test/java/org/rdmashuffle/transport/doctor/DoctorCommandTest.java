package org.rdmashuffle.transport.doctor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The command line and exit statuses, and {@code doctor} on this very machine. */
@Timeout(60)
class DoctorCommandTest {
    /** A run's exit status and what it printed. */
    record Run(int status, String out, String err) {
    }

    static Run doctor(String... args) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int status = DoctorCommand.run(args, new PrintStream(out, true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8));
        return new Run(status, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    @ParameterizedTest
    @ValueSource(strings = {"--bogus", "--outputs", "--outputs x", "--conf nokey", "--provider rdma",
            "--conf spark.shuffle.rdma.nope=1", "--conf spark.executor.cores=2", "--port 7000", "--reads 3", "--peer host", "--peer h:70000",
            "--size 12", "--serve --peer h:1", "--size 32m --peer h:1"})
    void shouldExitTwoWithTheUsageWhenTheCommandLineIsBad(String line) {
        Run r = doctor(line.split(" "));

        assertEquals(2, r.status(), r.toString());
        assertTrue(r.err().startsWith("doctor: "), r.err());
        assertTrue(r.err().contains("usage: java -cp <plugin jar> org.rdmashuffle.transport.doctor.Doctor"), r.err());
        assertEquals("", r.out());
    }

    @Test
    void shouldPrintTheUsageAndExitZeroWhenHelpIsAsked() {
        Run r = doctor("--help");
        assertEquals(0, r.status());
        assertTrue(r.out().contains("Exit status: 0 when no check FAILs, 1 when one does, 2 on bad usage."), r.out());
    }

    private static boolean hasRdmaDevice() throws IOException {
        Path ib = Path.of("/sys/class/infiniband");
        if (!Files.isDirectory(ib)) {
            return false;
        }
        try (Stream<Path> s = Files.list(ib)) {
            return s.findAny().isPresent();
        }
    }

    @Test
    void shouldWarnAndExitZeroUnderAutoWhenThisMachineHasNoRdmaDevice() throws IOException {
        assumeTrue(!hasRdmaDevice(), "this machine has an RDMA device: the no-device run does not apply");

        Run r = doctor("--provider", "auto", "--bind", "127.0.0.1", "--outputs", "100");

        assertEquals(0, r.status(), r.out());
        assertTrue(r.out().startsWith("WARN  rdma devices  no RDMA device: executors will use tcp"), r.out());
        assertTrue(r.out().contains("WARN  transport  opens tcp (auto: no RDMA device"), r.out());
        assertTrue(r.out().contains("SKIP  memlock  provider=auto will use tcp here"), r.out());
        assertTrue(r.out().lines().reduce((a, b) -> b).orElse("").matches(
                "doctor: .* provider=auto: \\d+ PASS, \\d+ WARN, 0 FAIL, \\d+ SKIP; exit status 0"), r.out());
    }

    @Test
    void shouldFailAndExitOneUnderVerbsWhenThisMachineHasNoRdmaDevice() throws IOException {
        assumeTrue(!hasRdmaDevice(), "this machine has an RDMA device: the no-device run does not apply");

        Run r = doctor("--provider", "verbs", "--bind", "127.0.0.1", "--outputs", "100", "--json");

        assertEquals(1, r.status(), r.out());
        assertTrue(r.out().startsWith("{\"host\":"), r.out());
        assertTrue(r.out().contains("{\"name\":\"rdma devices\",\"status\":\"FAIL\",\"detail\":\"no RDMA device: "
                + "provider=verbs cannot start"), r.out());
        assertTrue(r.out().contains("{\"name\":\"transport\",\"status\":\"FAIL\",\"detail\":\"spark.shuffle.rdma."
                + "provider=verbs, but the verbs provider cannot run: no RDMA device"), r.out());
        assertTrue(r.out().trim().endsWith("\"selfTest\":null,\"exitStatus\":1}"), r.out());
        assertEquals(1, r.out().lines().count(), "one JSON object on one line: " + r.out());
    }

    @Test
    void shouldFailNamingTheKeyWhenTheBindInterfaceDoesNotExist() {
        Run r = doctor("--provider", "tcp", "--bind", "rdnosuch0", "--outputs", "100");

        assertEquals(1, r.status(), r.out());
        assertTrue(r.out().contains("FAIL  bind address  spark.shuffle.rdma.bindAddress=rdnosuch0 matches no interface"),
                r.out());
        assertTrue(r.out().contains("SKIP  transport  no node opened"), r.out());
    }
}
