package org.rdmashuffle.conf;

import java.util.List;

/** A configuration that failed validation; the message lists every problem, one per line. */
public final class ConfigException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;
    private final List<String> problems;

    public ConfigException(List<String> problems) {
        super("invalid rdma-shuffle configuration:\n  " + String.join("\n  ", problems));
        this.problems = List.copyOf(problems);
    }

    public List<String> problems() {
        return problems;
    }
}
