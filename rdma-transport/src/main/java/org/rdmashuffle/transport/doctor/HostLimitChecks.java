package org.rdmashuffle.transport.doctor;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;
import org.rdmashuffle.conf.ByteSizes;
import org.rdmashuffle.conf.RdmaShuffleConf;

/**
 * The host's limits and devices the verbs provider needs beyond an RDMA device: the connection manager's
 * device, the locked-memory limit against what the executors register, and {@code vm.max_map_count} against the
 * map outputs they keep mapped.
 */
final class HostLimitChecks {
    /** The bit of {@code CAP_IPC_LOCK} in {@code CapEff}: with it, the kernel pins memory past the memlock limit. */
    static final int CAP_IPC_LOCK = 14;
    /** Maps a JVM holds besides registered outputs (its libraries, heap, thread stacks, the pool's chunks). */
    static final long MAP_HEADROOM = 8192;

    private HostLimitChecks() {
    }

    /** {@code /dev/infiniband/rdma_cm} exists and this user may read and write it. */
    static Check rdmaCm(HostContext host) {
        String name = "rdma_cm";
        Optional<String> irrelevant = host.verbsIrrelevant();
        if (irrelevant.isPresent()) {
            return Check.skip(name, irrelevant.get());
        }
        Path cm = host.paths().rdmaCm();
        if (!Files.exists(cm)) {
            return Check.of(name, host.verbsProblem(), cm + " does not exist",
                    "modprobe rdma_ucm (containers: pass the device, e.g. --device " + cm + ")");
        }
        if (!Files.isReadable(cm) || !Files.isWritable(cm)) {
            return Check.of(name, host.verbsProblem(), cm + " is not readable and writable by this user",
                    "give the user access to " + cm + " (rdma-core's udev rules make it 0666)");
        }
        return Check.pass(name, cm + " is readable and writable");
    }

    /**
     * The soft {@code Max locked memory} limit of this process against what a verbs executor pins: the pool's
     * registration cap, plus the map outputs it keeps registered.
     */
    static Check memlock(HostContext host) {
        String name = "memlock";
        Optional<String> irrelevant = host.verbsIrrelevant();
        if (irrelevant.isPresent()) {
            return Check.skip(name, irrelevant.get());
        }
        Optional<Long> limit;
        try {
            limit = lockedMemoryLimit(HostPaths.text(host.paths().limits()));
        } catch (IOException | IllegalArgumentException e) {
            return Check.of(name, Check.Status.WARN, "cannot read the limit from " + host.paths().limits() + ": "
                    + e.getMessage(), "check ulimit -l by hand: unlimited is what verbs wants");
        }
        if (limit.isEmpty()) {
            return Check.pass(name, "unlimited");
        }
        if (hasIpcLock(host)) {
            return Check.pass(name, "CAP_IPC_LOCK: the limit is not enforced (ulimit -l is "
                    + ByteSizes.format(limit.get()) + ")");
        }
        RdmaShuffleConf conf = host.conf();
        long pool = conf.poolMaxRegisteredBytes();
        long outputs = conf.maxRegisteredOutputBytes();
        String fix = "raise it to unlimited: ulimit -l unlimited, memlock in /etc/security/limits.conf, "
                + "LimitMEMLOCK=infinity in the systemd unit of the NodeManager or worker that starts executors";
        String seen = "ulimit -l is " + ByteSizes.format(limit.get());
        if (limit.get() < pool + outputs) {
            String outputCap = outputs > 0 ? " + " + RdmaShuffleConf.MAX_REGISTERED_OUTPUT_BYTES.name() + "="
                    + ByteSizes.format(outputs) : "";
            return Check.of(name, host.verbsProblem(), seen + ", below " + RdmaShuffleConf.POOL_MAX_REGISTERED_BYTES.name()
                    + "=" + ByteSizes.format(pool) + outputCap + ": registrations will fail", fix);
        }
        if (outputs == 0) {
            return Check.of(name, Check.Status.WARN, seen + ": the pool's " + ByteSizes.format(pool)
                    + " fit, but map outputs registered past the rest go to Spark's path ("
                    + RdmaShuffleConf.MAX_REGISTERED_OUTPUT_BYTES.name() + "=0 sets no cap)", fix);
        }
        return Check.pass(name, seen + ", enough for the pool's " + ByteSizes.format(pool) + " and "
                + ByteSizes.format(outputs) + " of outputs");
    }

    /** Whether this process holds {@code CAP_IPC_LOCK}; false when {@code /proc/self/status} cannot say. */
    static boolean hasIpcLock(HostContext host) {
        try {
            return effectiveCapabilities(HostPaths.text(host.paths().status()))
                    .map(caps -> (caps >>> CAP_IPC_LOCK & 1) != 0).orElse(false);
        } catch (IOException e) {
            return false;
        }
    }

    /** The {@code CapEff} bit mask in {@code /proc/<pid>/status} text; empty when there is none. */
    static Optional<Long> effectiveCapabilities(String status) {
        for (String line : status.split("\n")) {
            if (line.startsWith("CapEff:")) {
                try {
                    return Optional.of(Long.parseUnsignedLong(line.substring("CapEff:".length()).trim(), 16));
                } catch (NumberFormatException e) {
                    return Optional.empty();
                }
            }
        }
        return Optional.empty();
    }

    /**
     * The soft limit of {@code Max locked memory} in {@code /proc/<pid>/limits} text, in bytes; empty for
     * unlimited.
     */
    static Optional<Long> lockedMemoryLimit(String limits) {
        for (String line : limits.split("\n")) {
            if (line.startsWith("Max locked memory")) {
                String[] f = line.substring("Max locked memory".length()).trim().split("\\s+");
                if (f[0].equals("unlimited")) {
                    return Optional.empty();
                }
                return Optional.of(Long.parseLong(f[0]));
            }
        }
        throw new IllegalArgumentException("no 'Max locked memory' line");
    }

    /** {@code vm.max_map_count} against the outputs one executor is expected to keep mapped (one map each at least). */
    static Check maxMapCount(HostContext host, long outputs) {
        String name = "vm.max_map_count";
        long count;
        try {
            count = Long.parseLong(HostPaths.text(host.paths().maxMapCount()).trim());
        } catch (IOException | NumberFormatException e) {
            return Check.of(name, Check.Status.WARN, "cannot read " + host.paths().maxMapCount() + ": "
                    + e.getMessage(), "check sysctl vm.max_map_count by hand: at least " + (outputs + MAP_HEADROOM));
        }
        long needed = outputs + MAP_HEADROOM;
        String seen = count + " for " + outputs + " map outputs (one mapping each) and " + MAP_HEADROOM
                + " for the JVM";
        long suggested = Math.max(262_144, Long.highestOneBit(needed) << 2);
        String fix = "sysctl -w vm.max_map_count=" + suggested + " (and persist it in /etc/sysctl.d/)";
        if (count < outputs) {
            return Check.of(name, Check.Status.FAIL, seen + ": outputs past it go to Spark's path or fail", fix);
        }
        if (count < needed) {
            return Check.of(name, Check.Status.WARN, seen + ": little room left", fix);
        }
        return Check.pass(name, seen);
    }
}
