package org.rdmashuffle.shuffle;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportChoice;

/**
 * The readiness job's matrix: one line per executor (its provider and device, or why it has no node), one per
 * ordered pair of executors (MB/s and READ latency, or the failure's cause), then the cluster's problems and
 * the verdict; every line starts with {@code readiness:}. The exit status follows from it: 0 when every pair
 * is OK, 1 otherwise (or an executor runs tcp under the strict posture, or the cluster has a problem).
 *
 * @param lines what the job prints
 * @param exitStatus 0 or 1
 */
record ReadinessReport(List<String> lines, int exitStatus) {
    static final String PREFIX = "readiness: ";

    /**
     * What one executor's stage-1 task registered, or why it could not ({@code problem}); Java-serialised
     * between executors and driver, so it holds the transport's values as plain fields.
     */
    record Placed(String executorId, String host, String nodeHost, int nodePort, String nodeProvider,
                  long regionAddress, long regionLength, int rkey, String provider, String device, String api,
                  String reason, boolean fellBack, String problem) implements Serializable {
        private static final long serialVersionUID = 1L;

        static Placed failed(String executorId, String host, String problem) {
            return new Placed(executorId, host, "", 0, "", 0, 0, 0, "", "", "", "", false, problem);
        }

        boolean ok() {
            return problem == null;
        }

        NodeAddress node() {
            return new NodeAddress(nodeHost, nodePort, nodeProvider);
        }

        RegionDescriptor region() {
            return new RegionDescriptor(regionAddress, regionLength, rkey);
        }

        /** The same executor, claiming a region with {@code rkey} instead (a descriptor that lies). */
        Placed withRkey(int otherRkey) {
            return new Placed(executorId, host, nodeHost, nodePort, nodeProvider, regionAddress, regionLength,
                    otherRkey, provider, device, api, reason, fellBack, problem);
        }

        TransportChoice choice() {
            return new TransportChoice(provider, device, api, reason, fellBack);
        }
    }

    /**
     * What executor {@code from} measured READing from executor {@code to}: {@code ok} when every READ landed
     * and every byte was the one expected, else the {@code cause}.
     */
    record Pair(String from, String to, boolean ok, long bytesVerified, double mbPerSecond, double p50Ms,
                double p99Ms, String cause) implements Serializable {
        private static final long serialVersionUID = 1L;

        static Pair failed(String from, String to, String cause) {
            return new Pair(from, to, false, 0, 0, 0, 0, cause);
        }
    }

    /** Orders executor ids as numbers where they are numbers ({@code 2} before {@code 10}). */
    static final Comparator<String> EXECUTOR_ORDER = Comparator
            .<String, Boolean>comparing(id -> !id.chars().allMatch(Character::isDigit) || id.isEmpty())
            .thenComparing(id -> id.length()).thenComparing(Comparator.naturalOrder());

    /**
     * The matrix.
     *
     * @param header what was checked (one line, without the prefix)
     * @param executors every executor the job meant to check, placed or not
     * @param pairs what readers reported; an ordered pair of {@code executors} missing here is a failure
     * @param problems the cluster's problems (each fails the verdict)
     * @param notes remarks that do not fail it (a region left registered on an executor no task reached)
     * @param strict the strict posture ({@code provider=verbs}, {@code fallback=never}): a tcp executor fails
     */
    static ReadinessReport of(String header, List<Placed> executors, List<Pair> pairs, List<String> problems,
                              List<String> notes, boolean strict) {
        List<String> out = new ArrayList<>();
        out.add(PREFIX + header);
        List<Placed> sorted = new ArrayList<>(executors);
        sorted.sort(Comparator.comparing(Placed::executorId, EXECUTOR_ORDER));
        int executorsFailed = 0;
        for (Placed p : sorted) {
            String what;
            if (!p.ok()) {
                what = "FAIL " + p.problem();
                executorsFailed++;
            } else if (strict && !"verbs".equals(p.provider())) {
                what = p.choice().describe() + " FAIL: provider=verbs with fallback=never wants verbs here";
                executorsFailed++;
            } else {
                what = p.choice().describe();
            }
            out.add(PREFIX + "executor " + p.executorId() + " host " + p.host() + ": " + what);
        }
        Map<String, Pair> byPair = new TreeMap<>();
        for (Pair p : pairs) {
            byPair.putIfAbsent(p.from() + "\u0000" + p.to(), p);
        }
        int total = 0;
        int failed = 0;
        long verified = 0;
        for (Placed from : sorted) {
            for (Placed to : sorted) {
                if (from == to) {
                    continue;
                }
                total++;
                Pair p = byPair.get(from.executorId() + "\u0000" + to.executorId());
                if (p == null) {
                    p = Pair.failed(from.executorId(), to.executorId(), "no result came back from executor "
                            + from.executorId());
                }
                if (!p.ok()) {
                    failed++;
                }
                verified += p.bytesVerified();
                out.add(pairLine(p));
            }
        }
        for (String problem : problems) {
            out.add(PREFIX + "FAIL " + problem);
        }
        for (String note : notes) {
            out.add(PREFIX + "note: " + note);
        }
        boolean ok = failed == 0 && executorsFailed == 0 && problems.isEmpty() && !sorted.isEmpty();
        StringBuilder v = new StringBuilder(PREFIX).append("verdict ").append(ok ? "OK" : "FAIL").append(": ")
                .append(sorted.size()).append(sorted.size() == 1 ? " executor, " : " executors, ")
                .append(total - failed).append(" of ").append(total).append(" pairs OK, ")
                .append(String.format(Locale.ROOT, "%.1f MiB", verified / 1048576.0)).append(" verified");
        if (executorsFailed > 0) {
            v.append(", ").append(executorsFailed).append(executorsFailed == 1 ? " executor" : " executors")
                    .append(" not ready");
        }
        if (sorted.size() == 1) {
            v.append(" (one executor: nothing to READ between executors)");
        }
        out.add(v.toString());
        return new ReadinessReport(List.copyOf(out), ok ? 0 : 1);
    }

    /** {@code readiness: 1 -> 2  OK  812.4 MB/s  p50 1.1 ms  p99 2.3 ms}, or {@code FAIL <cause>}. */
    static String pairLine(Pair p) {
        String head = PREFIX + p.from() + " -> " + p.to() + "  ";
        if (!p.ok()) {
            return head + "FAIL " + p.cause();
        }
        return head + String.format(Locale.ROOT, "OK  %.1f MB/s  p50 %s ms  p99 %s ms", p.mbPerSecond(),
                millis(p.p50Ms()), millis(p.p99Ms()));
    }

    /** Two decimals below a millisecond, one above. */
    static String millis(double ms) {
        return String.format(Locale.ROOT, ms < 1 ? "%.2f" : "%.1f", ms);
    }

    /** The text as printed: every line, each ended by a newline. */
    String text() {
        StringBuilder b = new StringBuilder();
        for (String l : lines) {
            b.append(l).append('\n');
        }
        return b.toString();
    }
}
