package org.rdmashuffle.transport.doctor;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Where {@code doctor} reads the host: {@code /sys}, {@code /proc} and {@code /dev}, or a fake tree of each in
 * tests.
 */
public record HostPaths(Path sys, Path proc, Path dev) {
    /** This host's own trees. */
    public static HostPaths real() {
        return new HostPaths(Path.of("/sys"), Path.of("/proc"), Path.of("/dev"));
    }

    /** {@code /sys/class/infiniband}: one directory per RDMA device. */
    public Path infiniband() {
        return sys.resolve("class").resolve("infiniband");
    }

    /** {@code /dev/infiniband/rdma_cm}: the connection manager's character device. */
    public Path rdmaCm() {
        return dev.resolve("infiniband").resolve("rdma_cm");
    }

    /** {@code /proc/self/limits}. */
    public Path limits() {
        return proc.resolve("self").resolve("limits");
    }

    /** {@code /proc/self/status}: its {@code CapEff} line holds this process's effective capabilities. */
    public Path status() {
        return proc.resolve("self").resolve("status");
    }

    /** {@code /proc/sys/vm/max_map_count}. */
    public Path maxMapCount() {
        return proc.resolve("sys").resolve("vm").resolve("max_map_count");
    }

    /**
     * The whole text of a file of {@code /proc} or {@code /sys}, read in one buffered pass: these report a size of 0
     * (or 4096), and a sysctl read byte by byte from offset 1 on may come back cut short.
     */
    static String text(Path file) throws IOException {
        try (InputStream in = Files.newInputStream(file)) {
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }
}
