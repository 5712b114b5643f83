package org.rdmashuffle.shuffle.core.diagnostics;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.stream.Stream;

/**
 * What this JVM holds of the operating system's resources that a shuffle could leak: open file
 * descriptors, live threads, direct and memory-mapped NIO buffers, and mappings of shuffle files —
 * sampled for soak runs and leak tests, which compare them with a baseline after each cleanup.
 *
 * @param openFds        entries of {@code /proc/self/fd} (-1 where there is no procfs)
 * @param threads        live threads
 * @param directBytes    memory of the JVM's direct buffers ({@code ByteBuffer.allocateDirect})
 * @param mappedBuffers  memory-mapped buffers the JVM still holds
 * @param mappedBytes    their bytes
 * @param shuffleMappings lines of {@code /proc/self/maps} naming a {@code shuffle_} file (-1 without procfs)
 * @param threadGroups   live threads by name with its digits replaced by {@code #} (a pool's threads share one)
 */
public record ProcessResources(int openFds, int threads, long directBytes, long mappedBuffers, long mappedBytes,
                               int shuffleMappings, SortedMap<String, Integer> threadGroups) implements Serializable {
    private static final long serialVersionUID = 1L;

    /** This JVM's resources now. */
    public static ProcessResources sample() {
        long direct = 0;
        long mappedCount = 0;
        long mapped = 0;
        for (BufferPoolMXBean b : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
            if (b.getName().equals("direct")) {
                direct = b.getMemoryUsed();
            } else if (b.getName().equals("mapped")) {
                mappedCount = b.getCount();
                mapped = b.getMemoryUsed();
            }
        }
        SortedMap<String, Integer> groups = new TreeMap<>();
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            groups.merge(t.getName().replaceAll("[0-9]+", "#"), 1, Integer::sum);
        }
        return new ProcessResources(countOpenFds(), ManagementFactory.getThreadMXBean().getThreadCount(), direct,
                mappedCount, mapped, countShuffleMappings(), groups);
    }

    /** Threads of group {@code name} (see {@link #threadGroups}), 0 when there are none. */
    public int threadsIn(String name) {
        return threadGroups.getOrDefault(name, 0);
    }

    @Override
    public String toString() {
        return "fds " + openFds + ", threads " + threads + ", direct " + directBytes + " B, mapped " + mappedBuffers
                + " (" + mappedBytes + " B), shuffle-file mappings " + shuffleMappings;
    }

    private static int countOpenFds() {
        Path fds = Path.of("/proc/self/fd");
        if (!Files.isDirectory(fds)) {
            return -1;
        }
        int n = 0;
        try (DirectoryStream<Path> d = Files.newDirectoryStream(fds)) {
            for (Path ignored : d) {
                n++;
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot list " + fds, e);
        }
        return n - 1; // the stream's own descriptor
    }

    private static int countShuffleMappings() {
        Path maps = Path.of("/proc/self/maps");
        if (!Files.isReadable(maps)) {
            return -1;
        }
        try (Stream<String> lines = Files.lines(maps)) {
            return (int) lines.filter(l -> l.contains("/shuffle_")).count();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read " + maps, e);
        }
    }
}
