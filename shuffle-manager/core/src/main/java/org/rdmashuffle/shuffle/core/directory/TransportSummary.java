package org.rdmashuffle.shuffle.core.directory;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.List;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Pattern;
import org.rdmashuffle.transport.TransportChoice;

/**
 * Which transport every peer of a directory runs, summed up in one line for the operator: how many run
 * verbs on which device, how many tcp and why, how many no transport at all (they shuffle through the
 * engine's own path) and why — e.g. {@code 3 executors: 1 verbs (on mlx5_0: 1), 2 tcp (auto: no RDMA
 * device: 1; provider=tcp: 1)}. Reasons are grouped with what differs from host to host masked
 * ({@link #shortReason}), at most {@link #MAX_GROUPS} listed per provider (the largest; the rest as
 * {@code +N other reasons: M}), and the line shows one full reason as an example ({@code ; e.g. "..."})
 * when a listed group's reason was masked: the line stays short with hundreds of hosts.
 *
 * <p>It also decides when that line is worth logging ({@link #due}): once every expected peer has
 * reported (when the engine says how many it expects; else after {@link #QUIET_NANOS} without a report, and
 * after {@link #MISSING_QUIET_NANOS} when some expected peers never came);
 * afterwards again only when the line changed, at most once per {@link #MIN_INTERVAL_NANOS}. Time is
 * passed in, so the policy is tested without sleeping.
 *
 * <p>Thread-safe: the directory's RPC threads, the engine's listener thread and a timer call in at once.
 */
public final class TransportSummary {
    /** The provider name of a peer whose transport did not start: it shuffles through the engine's path. */
    public static final String NONE = "none";
    /** How long without a report before the line is logged when the engine cannot tell how many peers come. */
    public static final long QUIET_NANOS = 10_000_000_000L;
    /** How long without a report before the line is logged although not every expected peer reported. */
    public static final long MISSING_QUIET_NANOS = 60_000_000_000L;
    /** The least time between two logged lines (the first one excepted). */
    public static final long MIN_INTERVAL_NANOS = 60_000_000_000L;

    /** Reason groups listed per provider; the rest are counted together ("+N other reasons"). */
    static final int MAX_GROUPS = 3;
    /** The longest reason a group shows (longer ones are cut). */
    static final int MAX_REASON_CHARS = 100;
    /** The longest full reason shown as the line's example. */
    static final int MAX_EXAMPLE_CHARS = 160;
    private static final Pattern HOST_AFTER_ON = Pattern.compile(" on [^\\s:,;()'\"]+");
    private static final Pattern DIGITS = Pattern.compile("[0-9]+");

    private final String noun;
    private final int expected;
    private final Map<String, TransportChoice> live = new LinkedHashMap<>(); // in order of first report
    /** Every peer that ever reported, and what it first reported: the application's whole life. */
    private final Set<String> seen = new HashSet<>();
    private final Map<String, Integer> lifeCounts = new TreeMap<>();
    private final Map<String, TransportChoice> lifeExamples = new HashMap<>();
    private long changedAtNanos;
    private String lastLogged;
    private long loggedAtNanos;

    /**
     * @param noun what the peers are, plural ({@code executors})
     * @param expected how many peers the engine expects (0 when it cannot tell, e.g. with dynamic allocation)
     */
    public TransportSummary(String noun, int expected) {
        this.noun = noun;
        this.expected = expected;
    }

    /** A peer of the given id runs {@code choice} (replaces what it reported before). */
    public synchronized void put(String peerId, TransportChoice choice, long nowNanos) {
        TransportChoice before = live.put(peerId, choice);
        if (seen.add(peerId)) {
            lifeCounts.merge(key(choice), 1, Integer::sum);
            lifeExamples.putIfAbsent(key(choice), choice);
        }
        if (!choice.equals(before)) {
            changedAtNanos = nowNanos;
        }
    }

    /** The peer is gone (the engine removed it). */
    public synchronized void remove(String peerId, long nowNanos) {
        if (live.remove(peerId) != null) {
            changedAtNanos = nowNanos;
        }
    }

    /** Peers that reported and are not gone. */
    public synchronized int size() {
        return live.size();
    }

    /** What the peers now known run, in one line. */
    public synchronized String line() {
        Map<String, Integer> counts = new TreeMap<>();
        Map<String, TransportChoice> examples = new HashMap<>();
        for (TransportChoice c : live.values()) {
            counts.merge(key(c), 1, Integer::sum);
            examples.putIfAbsent(key(c), c);
        }
        return format(live.size(), counts, examples);
    }

    /** What every peer that ever reported ran (as it first reported), in one line: for the application's end. */
    public synchronized String lifeLine() {
        return format(seen.size(), lifeCounts, lifeExamples);
    }

    /**
     * The line to log now, or null: once all {@code expected} peers reported or after a quiet spell (see the
     * class), when it differs from the last one logged and (but for the first) at least
     * {@link #MIN_INTERVAL_NANOS} after it. A line returned counts as logged.
     */
    public synchronized String due(long nowNanos) {
        if (live.isEmpty()) {
            return null;
        }
        String line = line();
        if (line.equals(lastLogged)) {
            return null;
        }
        boolean settled = expected > 0 && live.size() >= expected
                || nowNanos - changedAtNanos >= (expected > 0 ? MISSING_QUIET_NANOS : QUIET_NANOS);
        boolean allowed = lastLogged == null || nowNanos - loggedAtNanos >= MIN_INTERVAL_NANOS;
        if (!settled || !allowed) {
            return null;
        }
        lastLogged = line;
        loggedAtNanos = nowNanos;
        return line;
    }

    /** Groups: verbs by device, the others by their reason made host-neutral ({@link #shortReason}). */
    private static String key(TransportChoice c) {
        return c.provider() + '\u0000' + (c.provider().equals("verbs") ? c.device() : shortReason(c.reason()));
    }

    /**
     * {@code reason} with what differs from host to host masked, so that hosts failing alike make one group:
     * the word after {@code " on "} (the host a node was to start on) becomes {@code <host>}, every run of
     * digits (addresses, ports, numbered host and interface names, errno values) {@code #}; cut to
     * {@link #MAX_REASON_CHARS}. {@code auto: no RDMA device} and {@code provider=tcp} stay as they are.
     */
    static String shortReason(String reason) {
        String s = HOST_AFTER_ON.matcher(reason).replaceAll(" on <host>");
        s = DIGITS.matcher(s).replaceAll("#");
        return cut(s, MAX_REASON_CHARS);
    }

    private static String cut(String s, int max) {
        return s.length() <= max ? s : s.substring(0, max - 3) + "...";
    }

    private String format(int total, Map<String, Integer> counts, Map<String, TransportChoice> examples) {
        String nouns = total == 1 && noun.endsWith("s") ? noun.substring(0, noun.length() - 1) : noun;
        StringBuilder b = new StringBuilder().append(total).append(' ').append(nouns).append(':');
        String sep = " ";
        String example = null; // one full reason per line, of the first listed group that was masked
        for (String provider : new String[] {"verbs", "tcp", NONE}) {
            List<Map.Entry<String, Integer>> groups = new ArrayList<>();
            int n = 0;
            for (Map.Entry<String, Integer> e : counts.entrySet()) {
                if (examples.get(e.getKey()).provider().equals(provider)) {
                    groups.add(e);
                    n += e.getValue();
                }
            }
            if (n == 0 && provider.equals(NONE)) {
                continue; // nobody without a transport: say nothing of it
            }
            groups.sort(Map.Entry.<String, Integer>comparingByValue(Comparator.reverseOrder())
                    .thenComparing(Map.Entry.comparingByKey()));
            b.append(sep).append(n).append(' ').append(provider.equals(NONE) ? "without a transport" : provider);
            if (n > 0) {
                b.append(" (");
                int others = 0;
                int otherPeers = 0;
                for (int i = 0; i < groups.size(); i++) {
                    Map.Entry<String, Integer> e = groups.get(i);
                    if (i >= MAX_GROUPS) {
                        others++;
                        otherPeers += e.getValue();
                        continue;
                    }
                    TransportChoice c = examples.get(e.getKey());
                    String shown = provider.equals("verbs") ? "on " + c.device() : shortReason(c.reason());
                    if (example == null && !provider.equals("verbs") && !shown.equals(c.reason())) {
                        example = c.reason();
                    }
                    b.append(i == 0 ? "" : "; ").append(shown).append(": ").append(e.getValue());
                }
                if (others > 0) {
                    b.append("; +").append(others).append(" other reason").append(others == 1 ? "" : "s")
                            .append(": ").append(otherPeers);
                }
                b.append(')');
            }
            sep = ", ";
        }
        if (example != null) {
            b.append("; e.g. \"").append(cut(example, MAX_EXAMPLE_CHARS)).append('"');
        }
        return b.toString();
    }
}
