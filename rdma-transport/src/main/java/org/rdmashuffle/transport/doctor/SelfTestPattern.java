package org.rdmashuffle.transport.doctor;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Optional;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The READ self-test's shared ground: the region's content (little-endian longs, the one at index {@code k} a
 * hash of {@code seed + k}), and the control messages by which a peer asks the server for its region.
 */
final class SelfTestPattern {
    /** What a peer sends to learn the region. */
    static final byte[] REQUEST = "rdma-shuffle doctor: region?".getBytes(StandardCharsets.US_ASCII);
    /** The reply's first int ("DRS1"). */
    static final int REPLY_MAGIC = 0x44525331;
    static final int REPLY_BYTES = 4 + RegionDescriptor.ENCODED_BYTES + 8;

    private SelfTestPattern() {
    }

    /** The region and the seed its content comes from. */
    record Served(RegionDescriptor region, long seed) {
    }

    /** The long at index {@code k} of a region filled from {@code seed} (a SplitMix64 step: every bit mixed). */
    static long word(long seed, long k) {
        long z = seed + (k + 1) * 0x9E3779B97F4A7C15L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** Fills {@code region} (position 0 to capacity, a multiple of 8) from {@code seed}. */
    static void fill(ByteBuffer region, long seed) {
        ByteBuffer b = region.duplicate().order(ByteOrder.LITTLE_ENDIAN).clear();
        for (int i = 0; i + 8 <= b.capacity(); i += 8) {
            b.putLong(i, word(seed, i >>> 3));
        }
    }

    /**
     * The offset, relative to {@code at} in {@code sink}, of the first byte of {@code length} bytes that differs from
     * the region's content at {@code regionOffset} (a multiple of 8), or -1 when all are as served.
     */
    static long firstDifference(ByteBuffer sink, int at, long regionOffset, int length, long seed) {
        ByteBuffer b = sink.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        long k0 = regionOffset >>> 3;
        for (int j = 0; j < length; j += 8) {
            long expected = word(seed, k0 + (j >>> 3));
            long got = b.getLong(at + j);
            if (got != expected) {
                return j + Long.numberOfTrailingZeros(got ^ expected) / 8;
            }
        }
        return -1;
    }

    static ByteBuffer reply(Served s) {
        ByteBuffer b = ByteBuffer.allocate(REPLY_BYTES).putInt(REPLY_MAGIC);
        s.region().writeTo(b);
        return b.putLong(s.seed()).flip();
    }

    /** The region and seed in a reply, or empty when it is not one. */
    static Optional<Served> parseReply(ByteBuffer reply) {
        if (reply == null || reply.remaining() != REPLY_BYTES || reply.getInt(reply.position()) != REPLY_MAGIC) {
            return Optional.empty();
        }
        ByteBuffer b = reply.duplicate();
        b.getInt();
        RegionDescriptor d = RegionDescriptor.readFrom(b);
        return Optional.of(new Served(d, b.getLong()));
    }
}
