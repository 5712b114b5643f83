package org.rdmashuffle.transport.doctor;

import java.util.List;
import java.util.Objects;

/**
 * Everything one {@code doctor} run found on one host.
 *
 * @param host this host's name
 * @param provider the configured provider ({@code auto}, {@code verbs}, {@code tcp})
 * @param checks every check, in the order run
 * @param selfTest what the READ self-test measured, or null when it did not run or failed
 */
public record Report(String host, String provider, List<Check> checks, SelfTestResult selfTest) {
    public Report {
        Objects.requireNonNull(host, "host");
        Objects.requireNonNull(provider, "provider");
        checks = List.copyOf(checks);
    }

    public long count(Check.Status status) {
        return checks.stream().filter(c -> c.status() == status).count();
    }

    /** 0 when no check failed, 1 when one did. */
    public int exitStatus() {
        return count(Check.Status.FAIL) == 0 ? 0 : 1;
    }
}
