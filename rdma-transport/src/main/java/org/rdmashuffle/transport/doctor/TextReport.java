package org.rdmashuffle.transport.doctor;

/**
 * {@code doctor}'s text form: one line per check ({@code PASS  name  detail}, and {@code -> fix: ...} unless it
 * passed), then a summary line.
 */
final class TextReport {
    private TextReport() {
    }

    static String line(Check c) {
        StringBuilder b = new StringBuilder(String.format("%-4s  %s  %s", c.status(), c.name(), c.detail()));
        if (c.status() != Check.Status.PASS && !c.fix().isEmpty()) {
            b.append(" -> fix: ").append(c.fix());
        }
        return b.toString();
    }

    static String summary(Report r) {
        return "doctor: " + r.host() + " provider=" + r.provider() + ": " + r.count(Check.Status.PASS) + " PASS, "
                + r.count(Check.Status.WARN) + " WARN, " + r.count(Check.Status.FAIL) + " FAIL, "
                + r.count(Check.Status.SKIP) + " SKIP; exit status " + r.exitStatus();
    }

    static String render(Report r) {
        StringBuilder b = new StringBuilder();
        for (Check c : r.checks()) {
            b.append(line(c)).append('\n');
        }
        return b.append(summary(r)).append('\n').toString();
    }
}
