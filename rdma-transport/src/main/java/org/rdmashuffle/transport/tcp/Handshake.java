package org.rdmashuffle.transport.tcp;

import java.nio.ByteBuffer;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Mutual challenge-response with a shared secret: each side proves it holds the secret by an
 * HMAC-SHA256 over both nonces, so the secret never crosses the wire.
 */
final class Handshake {
    private static final SecureRandom RANDOM = new SecureRandom();

    private Handshake() {
    }

    static byte[] nonce() {
        byte[] n = new byte[Wire.NONCE_BYTES];
        RANDOM.nextBytes(n);
        return n;
    }

    /** The proof a side sends; {@code role} 'c' for client, 's' for server. Zeros without a secret. */
    static byte[] proof(byte[] secret, char role, byte[] first, byte[] second) {
        if (secret == null) {
            return new byte[Wire.PROOF_BYTES];
        }
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            mac.update((byte) role);
            mac.update(first);
            mac.update(second);
            return mac.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }

    static boolean verify(byte[] expected, ByteBuffer src) {
        byte[] got = new byte[Wire.PROOF_BYTES];
        src.get(got);
        return MessageDigest.isEqual(expected, got);
    }
}
