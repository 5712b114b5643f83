package org.rdmashuffle.transport.tcp;

/** Frame layouts and constants of the tcp provider's protocol; docs/wire-format.md describes them. */
final class Wire {
    static final int MAGIC = 0x52445348; // "RDSH"
    static final short VERSION = 2;

    static final int HELLO_BYTES = 24;      // magic u32, version u16, flags u16, client nonce [16]
    static final int CHALLENGE_BYTES = 24;  // magic u32, version u16, status u16, server nonce [16]
    static final int AUTH_BYTES = 32;       // client proof [32]
    static final int WELCOME_BYTES = 36;    // status u32, server proof [32]
    static final int NONCE_BYTES = 16;
    static final int PROOF_BYTES = 32;
    static final int FLAG_AUTH = 1;

    static final int HS_OK = 0;
    static final int HS_BAD_VERSION = 1;
    static final int HS_AUTH_MISMATCH = 2;
    static final int HS_AUTH_FAILED = 3;
    /** The node serves as many connections as its limits allow; the client may retry. */
    static final int HS_BUSY = 4;

    /** Request header: op u8, reserved u8[3], request id u32, length u32, rkey u32, address u64. */
    static final int REQUEST_HEADER_BYTES = 24;
    /** Reply header: op u8, status u8, reserved u16, request id u32, length u32; then length payload bytes. */
    static final int REPLY_HEADER_BYTES = 12;

    static final byte OP_READ = 0x10;
    static final byte OP_READ_REPLY = 0x11;
    static final byte OP_CONTROL = 0x20;
    static final byte OP_CONTROL_REPLY = 0x21;
    static final byte OP_ERROR = 0x7F;

    private Wire() {
    }

    static String handshakeStatus(int s) {
        return switch (s) {
            case HS_OK -> "ok";
            case HS_BAD_VERSION -> "protocol version not supported by the peer";
            case HS_AUTH_MISMATCH -> "one side has spark.authenticate on and the other off";
            case HS_AUTH_FAILED -> "authentication failed (different secrets)";
            case HS_BUSY -> "the peer serves as many connections as its limits allow (spark.shuffle.rdma.maxConnections, "
                    + "spark.shuffle.rdma.maxHandshakingConnections, spark.shuffle.rdma.maxConnectionsPerAddress)";
            default -> "handshake status " + s;
        };
    }
}
