package org.rdmashuffle.transport.tcp;

import java.nio.ByteBuffer;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Mutual challenge-response with a shared secret: each side proves it holds the secret by an
 * HMAC-SHA256 over both nonces (and the realm the connection named, if any), so the secret never crosses
 * the wire and a proof for one realm is no proof for another.
 */
final class Handshake {
    private static final SecureRandom RANDOM = new SecureRandom();
    /**
     * The key of a proof checked for a realm the node does not know, so that the answer takes the work of
     * a known realm's; it never verifies (a client would need this random key).
     */
    private static final byte[] UNKNOWN_REALM_KEY = nonce();

    private Handshake() {
    }

    static byte[] nonce() {
        byte[] n = new byte[Wire.NONCE_BYTES];
        RANDOM.nextBytes(n);
        return n;
    }

    /** The proof a side sends; {@code role} 'c' for client, 's' for server. Zeros without a secret. */
    static byte[] proof(byte[] secret, char role, byte[] first, byte[] second) {
        return proof(secret, role, first, second, null);
    }

    /**
     * The proof a side sends on a connection that named {@code realm} (its UTF-8 bytes; null: none, and the
     * proof is the one without realms). Zeros without a secret.
     */
    static byte[] proof(byte[] secret, char role, byte[] first, byte[] second, byte[] realm) {
        if (secret == null) {
            return new byte[Wire.PROOF_BYTES];
        }
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            mac.update((byte) role);
            mac.update(first);
            mac.update(second);
            if (realm != null) {
                mac.update(realm);
            }
            return mac.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }

    /** Consumes a proof from {@code src}; whether it is {@code expected}, compared in constant time. */
    static boolean verify(byte[] expected, ByteBuffer src) {
        byte[] got = new byte[Wire.PROOF_BYTES];
        src.get(got);
        return MessageDigest.isEqual(expected, got);
    }

    /**
     * Consumes the client's proof for a realm the node does not know, doing the work of checking it (so the
     * refusal takes about as long as a wrong proof's); always false.
     */
    static boolean verifyUnknownRealm(ByteBuffer src, byte[] serverNonce, byte[] clientNonce, byte[] realm) {
        verify(proof(UNKNOWN_REALM_KEY, 'c', serverNonce, clientNonce, realm), src);
        return false;
    }
}
