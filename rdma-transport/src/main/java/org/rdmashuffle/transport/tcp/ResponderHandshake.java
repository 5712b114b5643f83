package org.rdmashuffle.transport.tcp;

import static org.rdmashuffle.transport.tcp.TcpResponder.LOG;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import org.rdmashuffle.transport.RateLimitedLog;
import org.rdmashuffle.transport.Realms;
import org.rdmashuffle.transport.SecretResolver;

/**
 * The serving side of the handshake: answers a connection's HELLO with a challenge (or a refusal) and
 * its AUTH with a welcome carrying the server's proof (or a refusal), moving the connection from
 * AWAIT_HELLO through AWAIT_AUTH to SERVING. A refused handshake gives its slot back at once and the
 * connection drains after its refusal is written. Responder thread only.
 */
final class ResponderHandshake {
    private final TcpResponder responder;
    private final byte[] secret;
    /** The secret of each realm, on a node that keeps one per realm; null on every other node. */
    private final SecretResolver secrets;
    private final RateLimitedLog handshakeLog = new RateLimitedLog(LOG, 10_000);

    ResponderHandshake(TcpResponder responder, byte[] secret, SecretResolver secrets) {
        this.responder = responder;
        this.secret = secret;
        this.secrets = secrets;
    }

    /** Parses a HELLO from {@code c.in} and writes the challenge; false when its bytes have not all arrived. */
    boolean hello(ServedConnection c) {
        ByteBuffer in = c.in;
        if (in.remaining() < Wire.HELLO_BYTES) {
            return false;
        }
        int at = in.position();
        int version = in.getShort(at + 4);
        int flags = in.getShort(at + 6);
        boolean namesRealm = (flags & Wire.FLAG_REALM) != 0;
        // Version 2 knows no realm; 3 may name one. A HELLO that is none of these is refused as a bad version.
        boolean wellFormed = in.getInt(at) == Wire.MAGIC
                && (version == Wire.VERSION || (version == Wire.VERSION_WITHOUT_REALM && !namesRealm));
        int realmLength = 0;
        if (wellFormed && namesRealm) {
            if (in.remaining() < Wire.HELLO_BYTES + 1) {
                return false;
            }
            realmLength = in.get(at + Wire.HELLO_BYTES) & 0xFF;
            if (realmLength == 0 || realmLength > Realms.MAX_BYTES) {
                wellFormed = false;
            } else if (in.remaining() < Wire.HELLO_BYTES + 1 + realmLength) {
                return false; // the handshake timeout bounds the wait; the input buffer holds the longest HELLO
            }
        }
        in.position(at + 8);
        c.clientNonce = new byte[Wire.NONCE_BYTES];
        in.get(c.clientNonce);
        c.serverNonce = Handshake.nonce();
        if (wellFormed && namesRealm) {
            in.get();
            c.realmBytes = new byte[realmLength];
            in.get(c.realmBytes);
            c.realm = decodeRealm(c.realmBytes);
            wellFormed = c.realm != null;
        }
        int status;
        if (!wellFormed) {
            status = Wire.HS_BAD_VERSION;
        } else if (secrets != null) {
            // Every connection names a realm and proves its secret; the verdict on the realm comes with the
            // proof's (WELCOME), so an unknown realm is answered where and as a wrong proof is.
            status = c.realm == null ? Wire.HS_REALM_REQUIRED
                    : (flags & Wire.FLAG_AUTH) == 0 ? Wire.HS_AUTH_MISMATCH : Wire.HS_OK;
        } else if (c.realm != null) {
            status = Wire.HS_REALM_UNSUPPORTED;
        } else if (((flags & Wire.FLAG_AUTH) != 0) != (secret != null)) {
            status = Wire.HS_AUTH_MISMATCH;
        } else {
            status = Wire.HS_OK;
        }
        c.out.putInt(Wire.MAGIC).putShort(Wire.VERSION).putShort((short) status).put(c.serverNonce);
        if (status != Wire.HS_OK) {
            refuse(c, status);
        } else {
            c.state = ServedConnection.State.AWAIT_AUTH;
        }
        return true;
    }

    /** Checks the AUTH in {@code c.in} and writes the welcome; false when its bytes have not all arrived. */
    boolean auth(ServedConnection c) {
        ByteBuffer in = c.in;
        if (in.remaining() < Wire.AUTH_BYTES) {
            return false;
        }
        byte[] key; // the secret the peer must prove it holds
        int status;
        if (secrets == null) {
            key = secret;
            boolean ok = secret == null
                    || Handshake.verify(Handshake.proof(secret, 'c', c.serverNonce, c.clientNonce), in);
            if (secret == null) {
                in.position(in.position() + Wire.AUTH_BYTES);
            }
            status = ok ? Wire.HS_OK : Wire.HS_AUTH_FAILED;
        } else {
            key = secretOf(c.realm, c);
            if (key == null) {
                Handshake.verifyUnknownRealm(in, c.serverNonce, c.clientNonce, c.realmBytes);
                status = Wire.HS_UNKNOWN_REALM;
            } else {
                boolean ok = Handshake.verify(Handshake.proof(key, 'c', c.serverNonce, c.clientNonce, c.realmBytes),
                        in);
                status = ok ? Wire.HS_OK : Wire.HS_AUTH_FAILED;
            }
        }
        if (status == Wire.HS_OK && !responder.admission.roomForAuthenticated(c)) {
            status = Wire.HS_BUSY; // past maxConnections, and no connection silent for a second any more
        }
        boolean ok = status == Wire.HS_OK;
        c.out.putInt(status);
        c.out.put(ok ? Handshake.proof(key, 's', c.clientNonce, c.serverNonce, c.realmBytes)
                : new byte[Wire.PROOF_BYTES]);
        if (ok) {
            c.state = ServedConnection.State.SERVING;
            c.clientNonce = null;
            c.serverNonce = null;
            c.realmBytes = null;
        } else {
            refuse(c, status);
        }
        return true;
    }

    /** The secret of {@code name} the resolver gives, or null for a realm it does not know (or fails on). */
    private byte[] secretOf(String name, ServedConnection c) {
        try {
            byte[] k = secrets.secretOf(name);
            return k == null || k.length == 0 ? null : k;
        } catch (RuntimeException e) {
            responder.errorLog.warn("the secret resolver failed for realm {} (a connection from {}, refused as of an "
                    + "unknown realm): {}", Realms.printable(name), c.remote, e.toString());
            return null;
        }
    }

    /** The handshake failed: its slot goes back now; the refusal is written, then the connection drains. */
    private void refuse(ServedConnection c, int status) {
        responder.connectionsRefused++;
        handshakeLog.warn("refused connection from {}: {}{}", c.remote, Wire.handshakeStatus(status),
                c.realm == null ? "" : " (realm " + Realms.printable(c.realm) + ")");
        c.clientNonce = null;
        c.serverNonce = null;
        c.realmBytes = null;
        responder.admission.leaveHandshake(c);
        c.closeAfterFlush = true;
    }

    /** The realm a HELLO names, or null when its bytes are not UTF-8. */
    private static String decodeRealm(byte[] utf8) {
        try {
            return StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(utf8)).toString();
        } catch (CharacterCodingException e) {
            return null;
        }
    }
}
