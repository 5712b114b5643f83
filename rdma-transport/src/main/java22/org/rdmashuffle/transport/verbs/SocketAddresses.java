package org.rdmashuffle.transport.verbs;

import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_SHORT;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.Inet4Address;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;

/** Socket addresses to and from the {@code sockaddr_in}/{@code sockaddr_in6} structs librdmacm takes and fills. */
final class SocketAddresses {
    private static final short AF_INET = 2;
    private static final short AF_INET6 = 10;

    private SocketAddresses() {
    }

    /** A sockaddr_in or sockaddr_in6 for {@code a}, in {@code arena}. */
    static MemorySegment sockaddr(Arena arena, InetSocketAddress a) throws UnknownHostException {
        InetAddress ip = a.getAddress();
        if (ip == null) {
            throw new UnknownHostException(a.getHostString());
        }
        int port = a.getPort();
        MemorySegment s;
        if (ip instanceof Inet4Address) {
            s = arena.allocate(16, 8);
            s.set(JAVA_SHORT, 0, AF_INET);
            s.asSlice(4, 4).copyFrom(MemorySegment.ofArray(ip.getAddress()));
        } else {
            s = arena.allocate(28, 8);
            s.set(JAVA_SHORT, 0, AF_INET6);
            s.asSlice(8, 16).copyFrom(MemorySegment.ofArray(ip.getAddress()));
            s.set(JAVA_INT, 24, ((Inet6Address) ip).getScopeId());
        }
        s.set(JAVA_BYTE, 2, (byte) (port >>> 8)); // network byte order
        s.set(JAVA_BYTE, 3, (byte) port);
        return s;
    }

    /** The socket address at {@code addr} (a sockaddr_in or sockaddr_in6), or null for another family. */
    static InetSocketAddress read(long addr) {
        MemorySegment m = RdmaCore.MEM;
        int family = m.get(java.lang.foreign.ValueLayout.JAVA_SHORT_UNALIGNED, addr) & 0xFFFF;
        int port = ((m.get(JAVA_BYTE, addr + 2) & 0xFF) << 8) | (m.get(JAVA_BYTE, addr + 3) & 0xFF);
        byte[] ip;
        if (family == AF_INET) {
            ip = new byte[4];
            MemorySegment.copy(m, JAVA_BYTE, addr + 4, ip, 0, 4);
        } else if (family == AF_INET6) {
            ip = new byte[16];
            MemorySegment.copy(m, JAVA_BYTE, addr + 8, ip, 0, 16);
        } else {
            return null;
        }
        try {
            return new InetSocketAddress(InetAddress.getByAddress(ip), port);
        } catch (UnknownHostException e) {
            return null;
        }
    }
}
