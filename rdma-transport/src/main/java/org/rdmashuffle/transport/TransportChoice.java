package org.rdmashuffle.transport;

import java.util.Objects;

/**
 * Which provider a node runs and why: what an operator asks first ("is it actually using RDMA?"). Made by
 * {@link RdmaTransport#openChosen} when the node opens; executors report it to the driver, which sums it up.
 *
 * @param provider {@code verbs} or {@code tcp}
 * @param device the RDMA device a verbs node runs on (e.g. {@code siw0}, {@code mlx5_0}); empty for tcp
 * @param api how a verbs node reaches rdma-core ({@code java.lang.foreign} or {@code DiSNI}); empty for tcp
 * @param reason why this provider: the configuration that asked for it, or what verbs lacked when
 *        {@code provider=auto} fell back to tcp (one line, as the WARN says it)
 * @param fellBack whether {@code provider=auto} wanted verbs and got tcp
 */
public record TransportChoice(String provider, String device, String api, String reason, boolean fellBack) {
    public TransportChoice {
        Objects.requireNonNull(provider, "provider");
        Objects.requireNonNull(device, "device");
        Objects.requireNonNull(api, "api");
        Objects.requireNonNull(reason, "reason");
    }

    /** A node of {@code provider} with no device (tcp), chosen for {@code reason}. */
    public static TransportChoice tcp(String reason, boolean fellBack) {
        return new TransportChoice("tcp", "", "", reason, fellBack);
    }

    /** One short line: {@code verbs on siw0 through java.lang.foreign} or {@code tcp (reason)}. */
    public String describe() {
        return device.isEmpty() ? provider + " (" + reason + ")" : provider + " on " + device
                + (api.isEmpty() ? "" : " through " + api);
    }
}
