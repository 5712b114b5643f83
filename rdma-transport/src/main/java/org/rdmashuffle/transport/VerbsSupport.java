package org.rdmashuffle.transport;

import java.util.Optional;
import org.rdmashuffle.conf.RdmaShuffleConf.VerbsApi;
import org.rdmashuffle.transport.verbs.VerbsApis;

/**
 * Finds out whether the verbs provider can run here: an RDMA device, and rdma-core reachable through
 * {@code java.lang.foreign} (Java 22+, libibverbs and librdmacm) or through DiSNI (its classes and
 * libdisni on {@code java.library.path}).
 */
public final class VerbsSupport {
    private VerbsSupport() {
    }

    /** Empty when verbs can run with {@code spark.shuffle.rdma.verbs.api=auto}; otherwise what is missing. */
    public static Optional<String> missing() {
        return VerbsApis.missing(VerbsApi.AUTO);
    }

    /** Empty when verbs can run through {@code api}; otherwise what is missing and how to fix it. */
    public static Optional<String> missing(VerbsApi api) {
        return VerbsApis.missing(api);
    }
}
