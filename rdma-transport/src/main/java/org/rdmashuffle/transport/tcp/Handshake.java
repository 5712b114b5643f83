package org.rdmashuffle.transport.tcp;

import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Mutual challenge-response with a shared secret: each side proves it holds the secret by an
 * HMAC-SHA256 over both nonces, the node's address as the client dialled it and the node accepted it, and
 * the realm the connection named (if any), so the secret never crosses the wire, a proof for one realm is
 * no proof for another, and a proof made for one node is no proof for another (a process that relays a
 * client's handshake to a node it did not dial gets a proof that node refuses).
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

    /**
     * The address field of the HELLO and the proofs for {@code node}: length u8 (4 or 16), the address, port
     * u16. An IPv4 address in IPv6 form is the IPv4 one (as the JDK reports either side's address).
     */
    static byte[] addressField(InetSocketAddress node) {
        byte[] a = node.getAddress().getAddress();
        return ByteBuffer.allocate(1 + a.length + 2).put((byte) a.length).put(a).putShort((short) node.getPort())
                .array();
    }

    /**
     * The proof a side sends; {@code role} 'c' for client, 's' for server; {@code address} the node's address
     * field ({@link #addressField}), null in proofs of versions before 4 (tests of the older wire only); {@code
     * realm} the realm's UTF-8 bytes, or null for a connection that named none. Zeros without a secret.
     */
    static byte[] proof(byte[] secret, char role, byte[] first, byte[] second, byte[] address, byte[] realm) {
        if (secret == null) {
            return new byte[Wire.PROOF_BYTES];
        }
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            mac.update((byte) role);
            mac.update(first);
            mac.update(second);
            if (address != null) {
                mac.update(address); // self-delimiting (its length first), so no realm can pass for it
            }
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
    static boolean verifyUnknownRealm(ByteBuffer src, byte[] serverNonce, byte[] clientNonce, byte[] address,
                                      byte[] realm) {
        verify(proof(UNKNOWN_REALM_KEY, 'c', serverNonce, clientNonce, address, realm), src);
        return false;
    }
}
