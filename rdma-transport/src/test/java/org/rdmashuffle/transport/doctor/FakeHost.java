package org.rdmashuffle.transport.doctor;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Optional;
import org.rdmashuffle.conf.RdmaShuffleConf;

/** A fake {@code /sys}, {@code /proc} and {@code /dev} under a temporary directory, filled file by file. */
final class FakeHost {
    final Path root;
    final HostPaths paths;

    FakeHost(Path root) {
        this.root = root;
        this.paths = new HostPaths(root.resolve("sys"), root.resolve("proc"), root.resolve("dev"));
    }

    /** Writes {@code content} to {@code relative} under the fake root (e.g. {@code sys/class/infiniband/x/node_type}). */
    FakeHost file(String relative, String content) {
        try {
            Path p = root.resolve(relative);
            Files.createDirectories(p.getParent());
            Files.writeString(p, content + "\n");
            return this;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    FakeHost dir(String relative) {
        try {
            Files.createDirectories(root.resolve(relative));
            return this;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** A host whose verbs provider could run (or not: {@code verbsMissing}) with {@code provider} and settings. */
    HostContext context(String provider, Optional<String> verbsMissing, Map<String, String> settings) {
        Map<String, String> all = new java.util.HashMap<>(settings);
        all.put(RdmaShuffleConf.PROVIDER.name(), provider);
        return new HostContext(paths, new RdmaShuffleConf(all), verbsMissing);
    }

    HostContext context(String provider) {
        return context(provider, Optional.empty(), Map.of());
    }
}
