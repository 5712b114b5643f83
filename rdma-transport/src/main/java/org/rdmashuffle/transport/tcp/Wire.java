package org.rdmashuffle.transport.tcp;

import org.rdmashuffle.transport.HandshakeRefusedException.Reason;
import org.rdmashuffle.transport.Realms;

/** Frame layouts and constants of the tcp provider's protocol; docs/wire-format.md describes them. */
final class Wire {
    static final int MAGIC = 0x52445348; // "RDSH"
    /**
     * The version this node speaks: 4 adds the address the client dialled to the HELLO and to both proofs, so a
     * proof made for one node is no proof for another (a relay); 3 added the realm.
     */
    static final short VERSION = 4;
    /** A HELLO of this version may name a realm and carries no address; a node with a secret refuses its proofs. */
    static final short VERSION_WITH_REALM = 3;
    /**
     * The oldest version accepted; a HELLO of it carries no realm. A client that names no realm sends
     * it, so nodes that know only version 2 still accept it, and refuse one that names a realm by its version.
     */
    static final short VERSION_WITHOUT_REALM = 2;

    static final int HELLO_BYTES = 24;      // magic u32, version u16, flags u16, client nonce [16]; realm, address
    static final int CHALLENGE_BYTES = 24;  // magic u32, version u16, status u16, server nonce [16]
    static final int AUTH_BYTES = 32;       // client proof [32]
    static final int WELCOME_BYTES = 36;    // status u32, server proof [32]
    static final int NONCE_BYTES = 16;
    static final int PROOF_BYTES = 32;
    static final int FLAG_AUTH = 1;
    /** The HELLO names a realm: length u8 (1 to {@link Realms#MAX_BYTES}) and that many bytes of UTF-8 follow it. */
    static final int FLAG_REALM = 2;
    /**
     * Version 4: the HELLO carries the address the client dialled (after the realm, if any): length u8 (4 for
     * IPv4, 16 for IPv6), the address, port u16. Both proofs cover it; a client with a secret always sends it.
     */
    static final int FLAG_ADDRESS = 4;
    /** The address field's longest form: length, an IPv6 address, port. */
    static final int MAX_ADDRESS_FIELD_BYTES = 1 + 16 + 2;
    /** The longest HELLO: with the longest realm and an IPv6 address. */
    static final int MAX_HELLO_BYTES = HELLO_BYTES + 1 + Realms.MAX_BYTES + MAX_ADDRESS_FIELD_BYTES;

    static final int HS_OK = 0;
    static final int HS_BAD_VERSION = 1;
    static final int HS_AUTH_MISMATCH = 2;
    /**
     * The proof did not verify; on a node with secrets per realm also: the realm is not one the node knows (never,
     * or no longer: its job finished), so that a client without the secret cannot tell known realms from unknown
     * ones.
     */
    static final int HS_AUTH_FAILED = 3;
    /** The node serves as many connections as its limits allow; the client may retry. */
    static final int HS_BUSY = 4;
    /* 5 was "unknown realm" in versions 3 and earlier; it is sent no more (status 3 says it). */
    /** The node keeps a secret per realm, and the HELLO named no realm. */
    static final int HS_REALM_REQUIRED = 6;
    /** The HELLO named a realm, and the node keeps no secrets per realm. */
    static final int HS_REALM_UNSUPPORTED = 7;
    /**
     * The address the HELLO says the client dialled is not the one the connection reached on the node: a relay,
     * port forward or NAT between them (the proofs name the address dialled, so they would not verify).
     */
    static final int HS_OTHER_ADDRESS = 8;

    /** Request header: op u8, reserved u8[3], request id u32, length u32, rkey u32, address u64. */
    static final int REQUEST_HEADER_BYTES = 24;
    /** Reply header: op u8, status u8, reserved u16, request id u32, length u32; then length payload bytes. */
    static final int REPLY_HEADER_BYTES = 12;

    static final byte OP_READ = 0x10;
    static final byte OP_READ_REPLY = 0x11;
    static final byte OP_CONTROL = 0x20;
    static final byte OP_CONTROL_REPLY = 0x21;
    static final byte OP_ERROR = 0x7F;

    /** What status {@link #HS_AUTH_MISMATCH} means, naming no key (a node knowing its key says it: KeyNames). */
    static final String AUTH_MISMATCH = "authentication is configured differently on the two sides (on at one, off "
            + "at the other)";

    private Wire() {
    }

    /** Why a handshake answered {@code s} (not {@link #HS_OK} nor {@link #HS_BUSY}) was refused. */
    static Reason reason(int s) {
        return switch (s) {
            case HS_BAD_VERSION -> Reason.BAD_VERSION;
            case HS_AUTH_MISMATCH -> Reason.AUTH_MISMATCH;
            case HS_AUTH_FAILED -> Reason.AUTH_FAILED;
            case HS_REALM_REQUIRED -> Reason.REALM_REQUIRED;
            case HS_REALM_UNSUPPORTED -> Reason.REALM_UNSUPPORTED;
            case HS_OTHER_ADDRESS -> Reason.OTHER_ADDRESS;
            default -> Reason.UNKNOWN;
        };
    }

    /** {@link #handshakeStatus(int, String)}, naming {@code keys}' authentication key where it applies. */
    static String handshakeStatus(int s, String realm, KeyNames keys) {
        return s == HS_AUTH_MISMATCH && realm == null ? keys.authMismatch : handshakeStatus(s, realm);
    }

    static String handshakeStatus(int s) {
        return switch (s) {
            case HS_OK -> "ok";
            case HS_BAD_VERSION -> "protocol version not supported by the peer (a peer of version 4 or later with "
                    + "authentication on refuses a client older than that, whose proof does not name the node)";
            case HS_AUTH_MISMATCH -> AUTH_MISMATCH; // nodes name their key: KeyNames.authMismatch
            case HS_AUTH_FAILED -> "authentication failed (different secrets)";
            case HS_BUSY -> "the peer serves as many connections as its limits allow"; // nodes say which: KeyNames.busy
            case HS_REALM_REQUIRED -> "the peer keeps a secret per realm (job), and the connection named no realm";
            case HS_REALM_UNSUPPORTED -> "the peer keeps no secrets per realm (job), and the connection named one";
            case HS_OTHER_ADDRESS -> "the connection reached the peer at another address than the one dialled: a "
                    + "relay, port forward or NAT between the two nodes (the handshake's proofs name the address "
                    + "dialled, so the peer refuses it)";
            default -> "handshake status " + s;
        };
    }

    /** {@link #handshakeStatus(int)} as the client of {@code realm} (null: none) reports it. */
    static String handshakeStatus(int s, String realm) {
        if (realm == null) {
            return handshakeStatus(s);
        }
        String r = Realms.printable(realm);
        return switch (s) {
            case HS_BAD_VERSION -> "protocol version not supported by the peer (a peer older than realms refuses "
                    + "a connection that names realm " + r + ")";
            case HS_AUTH_MISMATCH -> "authentication failed for realm " + r + ": the peer has authentication off";
            case HS_AUTH_FAILED -> "authentication failed for realm " + r + ": unknown job or wrong secret (the peer "
                    + "does not know the realm, or holds a different secret for it)";
            case HS_REALM_UNSUPPORTED -> "the peer keeps no secrets per realm (job), and this node named realm " + r;
            default -> handshakeStatus(s);
        };
    }
}
