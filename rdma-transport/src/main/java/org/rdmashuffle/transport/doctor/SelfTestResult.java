package org.rdmashuffle.transport.doctor;

/**
 * What the READ self-test measured.
 *
 * @param peer the server READ from ({@code tcp://10.0.0.1:7337})
 * @param transport the peer side's provider, as {@link org.rdmashuffle.transport.TransportChoice#describe} says
 * @param reads READs completed and verified
 * @param sizeBytes bytes per READ
 * @param bytesVerified bytes compared with the server's content, all equal
 * @param mbPerSecond bytes verified per second of the READ phase, in MB (10^6 bytes)
 * @param p50Ms median time from post to completion of one READ
 * @param p99Ms 99th percentile of it
 */
public record SelfTestResult(String peer, String transport, int reads, int sizeBytes, long bytesVerified,
                             double mbPerSecond, double p50Ms, double p99Ms) {
}
