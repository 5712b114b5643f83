package org.rdmashuffle.transport.doctor;

import java.util.Objects;

/**
 * One finding of {@code doctor}: what was checked, how it came out, what was seen, and (unless it passed)
 * what to do about it, in one line each.
 *
 * @param name what was checked ({@code memlock}, {@code port mlx5_0/1})
 * @param status how it came out
 * @param detail what was seen, one line
 * @param fix what to do, one line; empty when there is nothing to do
 */
public record Check(String name, Status status, String detail, String fix) {
    /** How a check came out; {@link #FAIL} makes {@code doctor} exit with status 1. */
    public enum Status { PASS, WARN, FAIL, SKIP }

    public Check {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(status, "status");
        Objects.requireNonNull(detail, "detail");
        Objects.requireNonNull(fix, "fix");
    }

    public static Check pass(String name, String detail) {
        return new Check(name, Status.PASS, detail, "");
    }

    public static Check skip(String name, String detail) {
        return new Check(name, Status.SKIP, detail, "");
    }

    public static Check of(String name, Status status, String detail, String fix) {
        return new Check(name, status, detail, fix);
    }
}
