package org.rdmashuffle.shuffle;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.IntFunction;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The shuffle's control messages, carried by {@link org.rdmashuffle.transport.RdmaChannel#call}:
 * executors register their node with the driver's directory, reducers look up an executor's node
 * there, and ask a serving executor for its output table of a shuffle. Data never travels this way.
 *
 * <p>Request: {@code type u8} then its fields; reply: {@code status u8} (0 found, 1 not found) then
 * the answer. Strings are {@code u16} length + UTF-8.
 */
public final class ControlProtocol {
    static final byte REGISTER_EXECUTOR = 1;
    static final byte LOOKUP_EXECUTOR = 2;
    static final byte LOOKUP_TABLE = 3;
    static final byte FOUND = 0;
    static final byte NOT_FOUND = 1;

    private ControlProtocol() {
    }

    public static ByteBuffer registerExecutor(String executorId, NodeAddress address) {
        byte[] id = executorId.getBytes(StandardCharsets.UTF_8);
        byte[] a = address.encode();
        return ByteBuffer.allocate(1 + 2 + id.length + a.length).put(REGISTER_EXECUTOR).putShort((short) id.length)
                .put(id).put(a).flip();
    }

    public static ByteBuffer lookupExecutor(String executorId) {
        byte[] id = executorId.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(1 + 2 + id.length).put(LOOKUP_EXECUTOR).putShort((short) id.length).put(id).flip();
    }

    public static ByteBuffer lookupTable(int shuffleId) {
        return ByteBuffer.allocate(5).put(LOOKUP_TABLE).putInt(shuffleId).flip();
    }

    /** The node address in a LOOKUP_EXECUTOR reply, or null when the directory does not know it. */
    public static NodeAddress parseAddressReply(ByteBuffer reply) {
        return reply.get() == FOUND ? NodeAddress.decode(reply) : null;
    }

    /** The table descriptor in a LOOKUP_TABLE reply, or null when the executor holds none for the shuffle. */
    public static RegionDescriptor parseTableReply(ByteBuffer reply) {
        return reply.get() == FOUND ? RegionDescriptor.readFrom(reply) : null;
    }

    private static String readString(ByteBuffer b) {
        byte[] s = new byte[b.getShort() & 0xFFFF];
        b.get(s);
        return new String(s, StandardCharsets.UTF_8);
    }

    /** The driver's directory of executor nodes: answers REGISTER_EXECUTOR and LOOKUP_EXECUTOR. */
    public static final class Directory implements ControlHandler {
        private final Map<String, NodeAddress> executors = new ConcurrentHashMap<>();

        @Override
        public ByteBuffer onMessage(ByteBuffer request) {
            byte type = request.get();
            switch (type) {
                case REGISTER_EXECUTOR -> {
                    String id = readString(request);
                    executors.put(id, NodeAddress.decode(request));
                    return ByteBuffer.wrap(new byte[] {FOUND});
                }
                case LOOKUP_EXECUTOR -> {
                    NodeAddress a = executors.get(readString(request));
                    if (a == null) {
                        return ByteBuffer.wrap(new byte[] {NOT_FOUND});
                    }
                    byte[] enc = a.encode();
                    return ByteBuffer.allocate(1 + enc.length).put(FOUND).put(enc).flip();
                }
                default -> throw new IllegalArgumentException("not a directory request: type " + type);
            }
        }

        /** Forgets an executor (it was lost or removed). */
        public void remove(String executorId) {
            executors.remove(executorId);
        }

        public int size() {
            return executors.size();
        }
    }

    /** An executor's answer to LOOKUP_TABLE, from a function shuffle id → its table (or null). */
    public static ControlHandler tables(IntFunction<RegionDescriptor> tableOf) {
        return request -> {
            byte type = request.get();
            if (type != LOOKUP_TABLE) {
                throw new IllegalArgumentException("not a table request: type " + type);
            }
            RegionDescriptor d = tableOf.apply(request.getInt());
            if (d == null) {
                return ByteBuffer.wrap(new byte[] {NOT_FOUND});
            }
            ByteBuffer b = ByteBuffer.allocate(1 + RegionDescriptor.ENCODED_BYTES).put(FOUND);
            d.writeTo(b);
            return b.flip();
        };
    }
}
