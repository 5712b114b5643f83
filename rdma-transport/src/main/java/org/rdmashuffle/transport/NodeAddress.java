package org.rdmashuffle.transport;

import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Objects;

/**
 * Where a node can be reached: host, port and the provider that serves there.
 *
 * @param host host name or literal address
 * @param port listening port
 * @param provider provider name ({@code tcp} or {@code verbs})
 */
public record NodeAddress(String host, int port, String provider) {
    public NodeAddress {
        Objects.requireNonNull(host, "host");
        Objects.requireNonNull(provider, "provider");
        if (port < 1 || port > 65535) {
            throw new IllegalArgumentException("port out of range: " + port);
        }
    }

    public InetSocketAddress socketAddress() {
        return new InetSocketAddress(host, port);
    }

    /** A compact binary form, for control messages. */
    public byte[] encode() {
        byte[] h = host.getBytes(StandardCharsets.UTF_8);
        byte[] p = provider.getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate(2 + h.length + 4 + 2 + p.length);
        b.putShort((short) h.length).put(h).putInt(port).putShort((short) p.length).put(p);
        return b.array();
    }

    /** Reads what {@link #encode()} wrote, advancing {@code b}. */
    public static NodeAddress decode(ByteBuffer b) {
        byte[] h = new byte[b.getShort() & 0xFFFF];
        b.get(h);
        int port = b.getInt();
        byte[] p = new byte[b.getShort() & 0xFFFF];
        b.get(p);
        return new NodeAddress(new String(h, StandardCharsets.UTF_8), port, new String(p, StandardCharsets.UTF_8));
    }

    @Override
    public String toString() {
        return provider + "://" + host + ":" + port;
    }
}
