package org.rdmashuffle.transport.doctor;

import java.util.Objects;
import java.util.Optional;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.conf.RdmaShuffleConf.Provider;

/**
 * What every check of one host knows: where to read the host, the configuration, and whether the verbs
 * provider could run here at all.
 *
 * @param paths where {@code /sys}, {@code /proc} and {@code /dev} are
 * @param conf the configuration the executors would run with
 * @param verbsMissing why the verbs provider cannot run here (no device, no rdma-core reachable from this
 *        JVM), or empty when it can ({@link org.rdmashuffle.transport.VerbsSupport#missing})
 */
public record HostContext(HostPaths paths, RdmaShuffleConf conf, Optional<String> verbsMissing) {
    public HostContext {
        Objects.requireNonNull(paths, "paths");
        Objects.requireNonNull(conf, "conf");
        Objects.requireNonNull(verbsMissing, "verbsMissing");
    }

    public Provider provider() {
        return conf.provider();
    }

    /** What a problem of the verbs set-up is: a FAIL when verbs is required, a WARN when auto may fall back. */
    public Check.Status verbsProblem() {
        return provider() == Provider.VERBS ? Check.Status.FAIL : Check.Status.WARN;
    }

    /**
     * Why a check of the verbs set-up does not matter here (provider=tcp; or provider=auto where verbs cannot run,
     * so executors use tcp anyway), or empty when it does.
     */
    public Optional<String> verbsIrrelevant() {
        if (provider() == Provider.TCP) {
            return Optional.of("provider=tcp: only verbs needs it");
        }
        if (provider() == Provider.AUTO && verbsMissing.isPresent()) {
            return Optional.of("provider=auto will use tcp here: " + verbsMissing.get());
        }
        return Optional.empty();
    }
}
