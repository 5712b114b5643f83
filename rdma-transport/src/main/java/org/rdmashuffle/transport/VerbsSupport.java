package org.rdmashuffle.transport;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;

/**
 * Finds out whether the verbs provider can run here: DiSNI's classes, its native library
 * {@code libdisni} on {@code java.library.path}, and an RDMA device.
 */
public final class VerbsSupport {
    private static volatile Optional<String> cached;

    private VerbsSupport() {
    }

    /** Empty when verbs can run; otherwise what is missing and how to fix it. */
    public static Optional<String> missing() {
        Optional<String> m = cached;
        if (m == null) {
            m = probe();
            cached = m;
        }
        return m;
    }

    private static Optional<String> probe() {
        try {
            Class.forName("com.ibm.disni.verbs.RdmaEventChannel", false, VerbsSupport.class.getClassLoader());
        } catch (ClassNotFoundException | LinkageError e) {
            return Optional.of("DiSNI classes are not on the class path (use the shaded rdma-shuffle jar)");
        }
        String path = System.getProperty("java.library.path", "");
        boolean found = false;
        for (String dir : path.split(File.pathSeparator)) {
            if (!dir.isEmpty() && Files.isRegularFile(Path.of(dir, System.mapLibraryName("disni")))) {
                found = true;
                break;
            }
        }
        if (!found) {
            return Optional.of("libdisni not found on java.library.path (" + path + "); build it from DiSNI's "
                    + "source and pass -Djava.library.path=<dir> (executors: spark.executor.extraLibraryPath)");
        }
        Path devices = Path.of("/sys/class/infiniband");
        try (var s = Files.list(devices)) {
            if (s.findAny().isEmpty()) {
                return Optional.of("no RDMA device in " + devices + " (load an RDMA driver, e.g. siw or rxe)");
            }
        } catch (java.io.IOException e) {
            return Optional.of("no RDMA device: " + devices + " does not exist (this kernel has no RDMA support)");
        }
        return Optional.empty();
    }
}
