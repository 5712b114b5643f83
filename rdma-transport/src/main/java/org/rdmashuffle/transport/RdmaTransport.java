package org.rdmashuffle.transport;

import java.io.IOException;
import java.util.Optional;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.tcp.TcpNode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Opens a node of the provider {@code spark.shuffle.rdma.provider} names. */
public final class RdmaTransport {
    private static final Logger LOG = LoggerFactory.getLogger(RdmaTransport.class);

    private RdmaTransport() {
    }

    /**
     * Opens a node. {@code auto} picks verbs where it can run and otherwise tcp, logging one INFO line
     * that names what was missing; {@code verbs} fails with that reason instead.
     */
    public static RdmaNode open(RdmaShuffleConf conf, NodeOptions options) throws IOException {
        switch (conf.provider()) {
            case TCP:
                return new TcpNode(conf, options);
            case VERBS: {
                Optional<String> missing = verbsMissing();
                throw new TransportException("spark.shuffle.rdma.provider=verbs, but the verbs provider cannot run: "
                        + missing.orElse("it is not part of this build yet") + ". Use provider=tcp or auto.");
            }
            case AUTO:
            default: {
                Optional<String> missing = verbsMissing();
                LOG.info("spark.shuffle.rdma.provider=auto: using tcp ({})",
                        missing.orElse("the verbs provider is not part of this build yet"));
                return new TcpNode(conf, options);
            }
        }
    }

    /**
     * Why a node of the configured provider cannot open on this machine, as far as can be told
     * without opening one (verbs: DiSNI's classes, libdisni, an RDMA device); empty when it should.
     * {@code auto} and {@code tcp} always can (auto falls back to tcp).
     */
    public static Optional<String> unavailable(RdmaShuffleConf conf) {
        if (conf.provider() == RdmaShuffleConf.Provider.VERBS) {
            return verbsMissing().map(why -> "spark.shuffle.rdma.provider=verbs, but the verbs provider cannot run: "
                    + why);
        }
        return Optional.empty();
    }

    private static Optional<String> verbsMissing() {
        Optional<String> m = VerbsSupport.missing();
        return m.isPresent() ? m : Optional.of("the verbs provider is not part of this build yet");
    }
}
