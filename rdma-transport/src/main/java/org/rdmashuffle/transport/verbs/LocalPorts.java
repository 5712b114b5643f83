package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.LongSupplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Tells this node's own failures from its peers': a failed READ or a disconnect says nothing of whose side
 * broke, and the core asks the node whether it failed before it blames a peer ({@code RdmaNode.failure}).
 * Both APIs use it the same way: before a work completion with an error status or a queue pair's
 * disconnect reaches its channel, and on the node's timer (READs that end in a timeout, with no
 * completion), the device's port states are read; when none of its ports is active the node records its
 * own failure ({@link VerbsNode#deviceFailed}) first. rdma_cm's DEVICE_REMOVAL records it at once.
 *
 * <p>Port states, not asynchronous events: DiSNI 2.1 exposes no {@code ibv_get_async_event}, and reading
 * the state where a failure is handled needs no thread of its own. Which port an address is on is known to
 * neither API here (DiSNI never fills {@code port_num}), so a device is down when no port of it is active;
 * one port per device is the common case (siw, rxe, mlx5).
 */
final class LocalPorts {
    private static final Logger LOG = LoggerFactory.getLogger(LocalPorts.class);
    /** A state read this recently, and active, is not read again (a queue pair flushes many completions). */
    private static final long RECHECK_NANOS = TimeUnit.MILLISECONDS.toNanos(10);

    private final String device;
    private final PortStates states;
    private final Consumer<String> nodeFailed;
    private final LongSupplier nanoTime;
    private volatile long activeAt;
    private volatile boolean activeSeen;
    private volatile boolean unreadableLogged;

    /**
     * @param device     the device's name, for the failure's reason
     * @param states     its port states
     * @param nodeFailed records the node's failure, with a reason
     */
    LocalPorts(String device, PortStates states, Consumer<String> nodeFailed) {
        this(device, states, nodeFailed, System::nanoTime);
    }

    /** With {@code nanoTime} as the clock (tests). */
    LocalPorts(String device, PortStates states, Consumer<String> nodeFailed, LongSupplier nanoTime) {
        this.device = device;
        this.states = states;
        this.nodeFailed = nodeFailed;
        this.nanoTime = nanoTime;
    }

    /** The port states of {@code device} in sysfs; an IOException when it has none there. */
    static PortStates sysfs(String device) {
        Path ports = Path.of("/sys/class/infiniband", device, "ports");
        return () -> {
            Map<Integer, String> m = new TreeMap<>();
            try (DirectoryStream<Path> d = Files.newDirectoryStream(ports)) {
                for (Path p : d) {
                    m.put(Integer.parseInt(p.getFileName().toString()), Files.readString(p.resolve("state")).trim());
                }
            } catch (NumberFormatException e) {
                throw new IOException("unexpected entry in " + ports + ": " + e.getMessage(), e);
            }
            return m;
        };
    }

    /** Whether a state as sysfs writes it ("4: ACTIVE") lets the port carry traffic. */
    static boolean active(String state) {
        String s = state.substring(state.indexOf(':') + 1).trim();
        return s.equals("ACTIVE") || s.equals("ACTIVE_DEFER");
    }

    /**
     * Reads the port states (unless they were read active within the last 10 ms) and records the node's
     * failure when no port is active. Off the READ path: called for failures and on the node's timer.
     *
     * @return whether the node's failure was recorded now
     */
    boolean check() {
        long now = nanoTime.getAsLong();
        if (activeSeen && now - activeAt < RECHECK_NANOS) {
            return false;
        }
        Map<Integer, String> s;
        try {
            s = states.read();
        } catch (IOException | RuntimeException e) {
            if (!unreadableLogged) {
                unreadableLogged = true;
                LOG.debug("verbs: cannot read the port states of {} ({}); local link failures are not told "
                        + "from a peer's", device, e.toString());
            }
            return false;
        }
        if (s.isEmpty()) {
            return false;
        }
        for (String state : s.values()) {
            if (active(state)) {
                activeAt = now;
                activeSeen = true;
                return false;
            }
        }
        activeSeen = false;
        StringBuilder why = new StringBuilder("no port of ").append(device).append(" is active (");
        s.forEach((port, state) -> why.append(why.charAt(why.length() - 1) == '(' ? "" : ", ")
                .append("port ").append(port).append(": ").append(state));
        nodeFailed.accept(why.append(')').toString());
        return true;
    }

    /** rdma_cm reported the device removed: the node's failure is recorded. */
    void deviceRemoved() {
        nodeFailed.accept("rdma_cm reports " + device + " removed");
    }
}
