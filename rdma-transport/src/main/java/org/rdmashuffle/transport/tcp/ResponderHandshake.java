package org.rdmashuffle.transport.tcp;

import static org.rdmashuffle.transport.tcp.TcpResponder.LOG;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
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
        boolean namesAddress = (flags & Wire.FLAG_ADDRESS) != 0;
        // Version 2 knows no realm, 3 no address, 4 both. A HELLO that is none of these is refused as a bad version.
        boolean wellFormed = in.getInt(at) == Wire.MAGIC
                && (version == Wire.VERSION || (version == Wire.VERSION_WITH_REALM && !namesAddress)
                        || (version == Wire.VERSION_WITHOUT_REALM && !namesRealm && !namesAddress));
        int end = at + Wire.HELLO_BYTES; // where the next field starts
        int realmLength = 0;
        if (wellFormed && namesRealm) {
            if (in.limit() < end + 1) {
                return false;
            }
            realmLength = in.get(end) & 0xFF;
            if (realmLength == 0 || realmLength > Realms.MAX_BYTES) {
                wellFormed = false;
            } else if (in.limit() < end + 1 + realmLength) {
                return false; // the handshake timeout bounds the wait; the input buffer holds the longest HELLO
            }
            end += 1 + realmLength;
        }
        int addressLength = 0;
        if (wellFormed && namesAddress) {
            if (in.limit() < end + 1) {
                return false;
            }
            addressLength = in.get(end) & 0xFF;
            if (addressLength != 4 && addressLength != 16) {
                wellFormed = false;
            } else if (in.limit() < end + 1 + addressLength + 2) {
                return false;
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
        byte[] dialled = null;
        if (wellFormed && namesAddress) {
            dialled = new byte[1 + addressLength + 2];
            in.get(dialled);
        }
        int status;
        String why = null;
        if (!wellFormed) {
            status = Wire.HS_BAD_VERSION;
        } else if (secrets != null) {
            // Every connection names a realm and proves its secret; the verdict on the realm comes with the
            // proof's (WELCOME), and in the same words, so an unknown realm cannot be told from a wrong proof.
            status = c.realm == null ? Wire.HS_REALM_REQUIRED
                    : (flags & Wire.FLAG_AUTH) == 0 ? Wire.HS_AUTH_MISMATCH : Wire.HS_OK;
        } else if (c.realm != null) {
            status = Wire.HS_REALM_UNSUPPORTED;
        } else if (((flags & Wire.FLAG_AUTH) != 0) != (secret != null)) {
            status = Wire.HS_AUTH_MISMATCH;
        } else {
            status = Wire.HS_OK;
        }
        if (status == Wire.HS_OK && (secret != null || secrets != null)) {
            // The proofs name this node's address as accepted: a client whose proof would not (older than
            // version 4) is refused, and one that dialled another address is told so before any proof.
            byte[] local = localAddressField(c);
            if (dialled == null) {
                status = Wire.HS_BAD_VERSION;
                why = "a client of version " + version + " (older than 4: its proof would not name this node)";
            } else if (!Arrays.equals(dialled, local)) {
                status = Wire.HS_OTHER_ADDRESS;
                why = "it dialled " + describe(dialled) + " and reached " + (local == null ? "?" : describe(local))
                        + ": a relay, port forward or NAT between the client and this node (the handshake's proofs "
                        + "name the address dialled)";
            }
        }
        c.out.putInt(Wire.MAGIC).putShort(Wire.VERSION).putShort((short) status).put(c.serverNonce);
        if (status != Wire.HS_OK) {
            refuse(c, status, why);
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
        byte[] address = null; // this node's address as the connection reached it, as both proofs name it
        int status;
        String why = null;
        if (secrets == null) {
            key = secret;
            boolean ok = secret == null;
            if (secret == null) {
                in.position(in.position() + Wire.AUTH_BYTES);
            } else {
                address = localAddressField(c);
                ok = Handshake.verify(Handshake.proof(secret, 'c', c.serverNonce, c.clientNonce, address, null), in);
            }
            status = ok ? Wire.HS_OK : Wire.HS_AUTH_FAILED;
        } else {
            address = localAddressField(c);
            key = secretOf(c.realm, c);
            status = Wire.HS_AUTH_FAILED; // an unknown realm and a wrong proof: one answer on the wire
            if (key == null) {
                Handshake.verifyUnknownRealm(in, c.serverNonce, c.clientNonce, address, c.realmBytes);
                why = "unknown realm (or its job finished): answered as a failed authentication";
            } else if (Handshake.verify(Handshake.proof(key, 'c', c.serverNonce, c.clientNonce, address,
                    c.realmBytes), in)) {
                status = Wire.HS_OK;
            }
        }
        if (status == Wire.HS_OK && c.realm != null && !responder.admission.roomForRealm(c)) {
            status = Wire.HS_BUSY; // this realm holds its share of the node's connections
            why = "its realm holds " + responder.admission.connectionsOfRealm(c.realm) + " connections; limit "
                    + responder.limits.keys().maxConnectionsPerRealm + "=" + responder.limits.maxConnectionsPerRealm();
        }
        if (status == Wire.HS_OK && !responder.admission.roomForAuthenticated(c)) {
            status = Wire.HS_BUSY; // past maxConnections, and no connection silent for a second any more
        }
        boolean ok = status == Wire.HS_OK;
        c.out.putInt(status);
        c.out.put(ok ? Handshake.proof(key, 's', c.clientNonce, c.serverNonce, address, c.realmBytes)
                : new byte[Wire.PROOF_BYTES]);
        if (ok) {
            responder.admission.servingRealm(c);
            c.state = ServedConnection.State.SERVING;
            c.clientNonce = null;
            c.serverNonce = null;
            c.realmBytes = null;
        } else {
            refuse(c, status, why);
        }
        return true;
    }

    /** This node's address as {@code c} reached it (the address field), or null when the socket cannot say. */
    private static byte[] localAddressField(ServedConnection c) {
        try {
            return c.ch.getLocalAddress() instanceof InetSocketAddress local ? Handshake.addressField(local) : null;
        } catch (IOException e) {
            return null;
        }
    }

    /** An address field as {@code address:port}. */
    private static String describe(byte[] field) {
        ByteBuffer b = ByteBuffer.wrap(field);
        byte[] a = new byte[b.get() & 0xFF];
        b.get(a);
        int port = b.getShort() & 0xFFFF;
        try {
            return new InetSocketAddress(InetAddress.getByAddress(a), port).toString();
        } catch (IOException e) {
            return "?:" + port;
        }
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

    /**
     * The handshake failed: its slot goes back now; the refusal is written, then the connection drains. {@code why}
     * is what the log says (the client may be told less: an unknown realm is answered as a failed proof), or null
     * for the status's words.
     */
    private void refuse(ServedConnection c, int status, String why) {
        responder.connectionsRefused++;
        handshakeLog.warn("refused connection from {}: {}{}", c.remote,
                why != null ? why : status == Wire.HS_BUSY ? responder.limits.keys().busy
                        : Wire.handshakeStatus(status, null, responder.limits.keys()),
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
