package org.rdmashuffle.transport;

import java.io.IOException;
import java.util.Optional;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.tcp.TcpNode;
import org.rdmashuffle.transport.verbs.VerbsApis;
import org.rdmashuffle.transport.verbs.VerbsNode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Opens a node of the provider {@code spark.shuffle.rdma.provider} names. */
public final class RdmaTransport {
    private static final Logger LOG = LoggerFactory.getLogger(RdmaTransport.class);

    private RdmaTransport() {
    }

    /**
     * Opens a node. {@code auto} picks verbs where it can run and otherwise tcp, logging one WARN line
     * that names what was missing (a provider chosen as asked is logged at INFO); {@code verbs} fails with
     * that reason instead. Options with realms ({@link NodeOptions#usesRealms()}) need the java.lang.foreign
     * API (a protection domain per realm, queue pairs bound to a realm by a proof in rdma_cm private data):
     * where DiSNI would be used, {@code auto} picks tcp and {@code verbs} fails, saying so.
     */
    public static RdmaNode open(RdmaShuffleConf conf, NodeOptions options) throws IOException {
        return openChosen(conf, options).node();
    }

    /** A node and which provider it runs and why. */
    public record Opened(RdmaNode node, TransportChoice choice) {
    }

    /** Opens a node as {@link #open} does, and says which provider it runs and why. */
    public static Opened openChosen(RdmaShuffleConf conf, NodeOptions options) throws IOException {
        String provider = conf.keyName(RdmaShuffleConf.PROVIDER); // as the user set it
        switch (conf.provider()) {
            case TCP:
                return new Opened(new TcpNode(conf, options), TransportChoice.tcp("provider=tcp", false));
            case VERBS: {
                Optional<String> missing = VerbsSupport.missing(conf.verbsApi()).map(conf::naming);
                if (missing.isPresent()) {
                    throw new TransportException(provider + "=verbs, but the verbs provider cannot run: "
                            + missing.get() + ". Use provider=tcp or auto.");
                }
                Optional<String> unsupported = verbsCannotServe(conf, options).map(conf::naming);
                if (unsupported.isPresent()) {
                    throw new TransportException(provider + "=verbs, but " + unsupported.get()
                            + ". Use provider=tcp or auto.");
                }
                try {
                    VerbsNode n = new VerbsNode(conf, options);
                    return new Opened(n, verbsChoice(n, "provider=verbs"));
                } catch (IOException | LinkageError e) {
                    throw new TransportException(provider + "=verbs, but the verbs node did not start: "
                            + e.getMessage() + ". Use provider=tcp or auto.", e);
                }
            }
            case AUTO:
            default: {
                Optional<String> missing = VerbsSupport.missing(conf.verbsApi())
                        .or(() -> verbsCannotServe(conf, options)).map(conf::naming);
                if (missing.isPresent()) {
                    LOG.warn("{}=auto: using tcp ({})", provider, missing.get());
                    return new Opened(new TcpNode(conf, options), TransportChoice.tcp("auto: " + missing.get(), true));
                }
                try {
                    VerbsNode n = new VerbsNode(conf, options);
                    LOG.info("{}=auto: using verbs through {}", provider, n.api());
                    return new Opened(n, verbsChoice(n, "provider=auto"));
                } catch (IOException | LinkageError e) {
                    LOG.warn("{}=auto: using tcp (the verbs node did not start on {}: {})", provider,
                            options.bindHost(), e.getMessage());
                    return new Opened(new TcpNode(conf, options), TransportChoice.tcp("auto: the verbs node did not start on "
                            + options.bindHost() + ": " + e.getMessage(), true));
                }
            }
        }
    }

    private static TransportChoice verbsChoice(VerbsNode n, String reason) {
        return new TransportChoice("verbs", n.device(), n.api(), reason, false);
    }

    /**
     * What in {@code options} the verbs provider cannot serve through the API {@code conf} leads to (realms over
     * DiSNI, {@link VerbsApis#REALMS_NEED_PRIVATE_DATA}); empty when nothing. Asked once verbs can run.
     */
    static Optional<String> verbsCannotServe(RdmaShuffleConf conf, NodeOptions options) {
        return options.usesRealms() ? VerbsApis.realmsMissing(conf.verbsApi()) : Optional.empty();
    }

    /**
     * Why a node of the configured provider cannot open on this machine, as far as can be told
     * without opening one (verbs: an RDMA device, and rdma-core through java.lang.foreign or DiSNI); empty
     * when it should.
     * {@code auto} and {@code tcp} always can (auto falls back to tcp).
     */
    public static Optional<String> unavailable(RdmaShuffleConf conf) {
        if (conf.provider() == RdmaShuffleConf.Provider.VERBS) {
            return VerbsSupport.missing(conf.verbsApi()).map(
                    why -> conf.keyName(RdmaShuffleConf.PROVIDER) + "=verbs, but the verbs provider cannot run: " + why);
        }
        return Optional.empty();
    }
}
