package org.rdmashuffle.shuffle.core.format;

import java.nio.ByteBuffer;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The layout of an output table as peers READ it: one fixed-size slot per map index, which reducers
 * READ to learn where a map output's regions and partition offsets are, with nothing running on the
 * serving process per request. The serving side writes it ({@code serve.RegisteredOutputTable}); the
 * reading side parses it ({@link Slot}, {@link Metadata}).
 *
 * <p>Slot ({@link #SLOT_BYTES} bytes, big-endian): {@code state u32} (0 empty, 1 published, 2 committed
 * but not registered: read it through the engine's own shuffle path),
 * {@code regionCount u32}, {@code mapId u64}, then the descriptor of the output's metadata region:
 * {@code address u64, rkey u32, length u32}. Metadata region: {@code regionCount u32,
 * numPartitions u32, maxRegionBytes u64, mapId u64}, {@code regionCount} region descriptors
 * ({@link RegionDescriptor#ENCODED_BYTES} each), then {@code numPartitions + 1} partition offsets
 * ({@code u64}); the descriptors' lengths are the regions' (every region but the last is
 * {@code maxRegionBytes} long), so a reader learns the data file's length from them and READs only
 * the offsets it needs: the header and descriptors, then offsets {@code start..end} of its partition
 * range ({@link #offsetPosition}). Nothing but the metadata region holds a map output's offsets on the
 * serving side once published. A slot's state is written last, after a release fence, so a reader that sees
 * "published" sees the rest — unless its READ of the 32 bytes overlapped a rewrite of the slot (a
 * READ is not atomic): the metadata repeats the map id, so a reader can tell a torn slot from a
 * good one and READ it again.
 *
 * <p>Constants and parsers only: not instantiable.
 */
public final class ShuffleOutputTable {
    public static final int SLOT_BYTES = 32;
    /**
     * The most regions one map output may have: a writer leaves a larger output to the engine's path
     * ({@link MapOutputLayout}), and a reader refuses metadata that claims more before it allocates a
     * descriptor for each — a lying peer could otherwise claim millions of 1-byte regions and fill the
     * reader's heap. 65,536 regions of the default 1 GiB are 64 TiB; of the smallest, 4 KiB, 256 MiB.
     */
    public static final int MAX_REGIONS = 1 << 16;
    public static final int META_HEADER_BYTES = 24;
    public static final int STATE_EMPTY = 0;
    public static final int STATE_PUBLISHED = 1;
    public static final int STATE_UNREGISTERED = 2;

    private ShuffleOutputTable() {
    }

    /** Length of the metadata region of a map output of {@code regionCount} regions and {@code numPartitions}. */
    public static long metadataBytes(int regionCount, int numPartitions) {
        return META_HEADER_BYTES + (long) regionCount * RegionDescriptor.ENCODED_BYTES + (numPartitions + 1L) * 8;
    }

    /** Where partition {@code partition}'s offset lies in a metadata region of {@code regionCount} regions. */
    public static long offsetPosition(int regionCount, int partition) {
        return META_HEADER_BYTES + (long) regionCount * RegionDescriptor.ENCODED_BYTES + (long) partition * 8;
    }

    /**
     * A slot as a reducer READ it.
     *
     * @param published whether a registered map output is there
     * @param unregistered whether a map output is there that is not registered (the engine's own path serves it)
     * @param regionCount regions of the output
     * @param mapId the map task attempt that wrote it
     * @param metadata where its metadata region is
     */
    public record Slot(boolean published, boolean unregistered, int regionCount, long mapId,
                       RegionDescriptor metadata) {
        /** Parses the {@link #SLOT_BYTES} bytes at {@code b}'s position. */
        public static Slot parse(ByteBuffer b) {
            int at = b.position();
            int state = b.getInt(at);
            if (state != STATE_EMPTY && state != STATE_PUBLISHED && state != STATE_UNREGISTERED) {
                throw new IllegalArgumentException("corrupt output table slot: state " + state);
            }
            return new Slot(state == STATE_PUBLISHED, state == STATE_UNREGISTERED, b.getInt(at + 4), b.getLong(at + 8),
                    new RegionDescriptor(b.getLong(at + 16), b.getInt(at + 28) & 0xFFFFFFFFL, b.getInt(at + 24)));
        }
    }

    /**
     * What a reducer keeps of a map output's metadata: its header and region descriptors, no offsets —
     * a few dozen bytes whatever its partition count.
     *
     * @param numPartitions the map output's partitions
     * @param maxRegionBytes the length of every region but the last
     * @param totalBytes the data file's length
     * @param regions descriptors of the output's regions, in file order
     * @param mapId the map task attempt it belongs to (the slot that pointed here must name the same)
     * @param where the metadata region, which offsets are READ from
     */
    public record Metadata(int numPartitions, long maxRegionBytes, long totalBytes, RegionDescriptor[] regions,
                           long mapId, RegionDescriptor where) {
        /**
         * Parses the header and region descriptors at {@code b}'s position (offsets may follow; they are
         * not read) of the metadata region {@code where}, checking them against each other and the region's
         * length.
         *
         * @throws IllegalArgumentException when they do not fit
         */
        public static Metadata parse(ByteBuffer b, RegionDescriptor where) {
            ByteBuffer m = b.duplicate();
            if (m.remaining() < META_HEADER_BYTES) {
                throw new IllegalArgumentException("corrupt map output metadata: " + m.remaining() + " bytes");
            }
            int regionCount = m.getInt();
            int numPartitions = m.getInt();
            long maxRegion = m.getLong();
            long mapId = m.getLong();
            if (regionCount < 0 || regionCount > MAX_REGIONS || numPartitions < 0
                    || m.remaining() < (long) regionCount * RegionDescriptor.ENCODED_BYTES) {
                throw new IllegalArgumentException("corrupt map output metadata: " + regionCount + " regions, "
                        + numPartitions + " partitions in " + b.remaining() + " bytes");
            }
            if (where.length() != metadataBytes(regionCount, numPartitions)) {
                throw new IllegalArgumentException("corrupt map output metadata: " + regionCount + " regions and "
                        + numPartitions + " partitions take " + metadataBytes(regionCount, numPartitions)
                        + " bytes, its region holds " + where.length());
            }
            if (regionCount > 0 && (maxRegion < 1 || maxRegion > Integer.MAX_VALUE)) {
                throw new IllegalArgumentException("corrupt map output metadata: regions of " + maxRegion + " bytes");
            }
            RegionDescriptor[] regions = new RegionDescriptor[regionCount];
            long total = 0;
            for (int r = 0; r < regionCount; r++) {
                regions[r] = RegionDescriptor.readFrom(m);
                long len = regions[r].length();
                if (r < regionCount - 1 ? len != maxRegion : len < 1 || len > maxRegion) {
                    throw new IllegalArgumentException("corrupt map output metadata: region " + r + " of "
                            + regionCount + " is " + len + " bytes long, regions are " + maxRegion);
                }
                total += len;
            }
            return new Metadata(numPartitions, regionCount == 0 ? Integer.MAX_VALUE : maxRegion, total, regions,
                    mapId, where);
        }

        /** Bytes of the data file (the regions' lengths summed). */
        public long totalBytes() {
            return totalBytes;
        }

        /** Where partition {@code partition}'s offset lies in the metadata region. */
        public long offsetPosition(int partition) {
            return ShuffleOutputTable.offsetPosition(regions.length, partition);
        }

        /**
         * Reads offsets {@code start..end} (inclusive) of {@code end - start + 1} longs at {@code b}'s
         * position into {@code out[0..]}, checking what a lying peer could send: offsets decreasing, outside
         * the data file, or not 0 and its length at the ends.
         *
         * @throws IllegalArgumentException when they are wrong
         */
        public void readOffsets(ByteBuffer b, int start, int end, long[] out) {
            if (start < 0 || end > numPartitions || start > end || out.length < end - start + 1) {
                throw new IllegalArgumentException("partitions [" + start + ", " + end + ") outside the map output's "
                        + numPartitions);
            }
            int at = b.position();
            long previous = 0;
            for (int p = start; p <= end; p++) {
                long o = b.getLong(at + (p - start) * 8);
                if (o < previous || o > totalBytes || (p == 0 && o != 0) || (p == numPartitions && o != totalBytes)) {
                    throw new IllegalArgumentException("corrupt map output metadata: partition " + p + " at offset "
                            + o + " (after " + previous + ", in " + totalBytes + " bytes)");
                }
                previous = o;
                out[p - start] = o;
            }
        }

        /** Heap bytes this metadata holds, roughly: a few fields and the region descriptors, no offsets. */
        public long heldBytes() {
            return 64 + 16 + regions.length * (16L + 32);
        }
    }
}
