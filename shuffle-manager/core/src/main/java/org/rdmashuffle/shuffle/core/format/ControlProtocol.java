package org.rdmashuffle.shuffle.core.format;

import java.nio.ByteBuffer;
import java.util.function.IntFunction;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The shuffle's control message between executors, carried by
 * {@link org.rdmashuffle.transport.RdmaChannel#call}: a reducer asks a serving executor, once per
 * shuffle, for the descriptor of its output table. (Processes find each other's nodes through the engine's
 * directory, {@code directory.PeerDirectory}.) Data never travels this way.
 *
 * <p>Request: {@code type u8} then its fields; reply: {@code status u8} (0 found, 1 not found) then
 * the answer.
 */
public final class ControlProtocol {
    static final byte LOOKUP_TABLE = 3;
    static final byte FOUND = 0;
    static final byte NOT_FOUND = 1;

    private ControlProtocol() {
    }

    public static ByteBuffer lookupTable(int shuffleId) {
        return ByteBuffer.allocate(5).put(LOOKUP_TABLE).putInt(shuffleId).flip();
    }

    /** The table descriptor in a LOOKUP_TABLE reply, or null when the executor holds none for the shuffle. */
    public static RegionDescriptor parseTableReply(ByteBuffer reply) {
        return reply.get() == FOUND ? RegionDescriptor.readFrom(reply) : null;
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
