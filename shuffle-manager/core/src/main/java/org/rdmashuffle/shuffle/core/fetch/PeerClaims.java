package org.rdmashuffle.shuffle.core.fetch;

import java.nio.ByteBuffer;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Expected;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Request;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;

/**
 * Checks of what a peer claims — its output table slot, its map output's metadata and the offsets of a
 * request's partitions — against what the request and the driver know, before the fetcher believes them
 * (and before it takes a buffer the size they claim). Each check returns what is wrong, or null; only a
 * wrong claim allocates its message.
 *
 * <p><b>Torn claims.</b> A READ of a slot or of a metadata window is not atomic: one that overlapped a
 * rewrite (a map attempt republished) or whose bytes had not all landed may show a mix of two claims.
 * What such a mix could explain — a slot whose metadata names another attempt or has the wrong length,
 * metadata that contradicts its slot, offsets that do not rise within the data — the
 * {@link RequestStateMachine} READs again, slot first, up to {@link #MAX_TORN_SLOT_READS} times in a row
 * before the request fails; what no tear explains fails it at once. The checks here only say what is
 * wrong; the state machine decides which of the two follows.
 */
final class PeerClaims {
    /** Torn slot READs tolerated in a row before the request fails. */
    static final int MAX_TORN_SLOT_READS = 3;

    private PeerClaims() {
    }

    /**
     * Whether the peer leaves the map attempt to the engine's path: its slot is empty (the output migrated
     * there or lost), holds another attempt, or was committed unregistered.
     *
     * @return why the block goes through the engine's path, or null when the peer serves it by READs
     */
    static String viaEngine(Request r, ShuffleOutputTable.Slot slot) {
        if (!slot.published() && !slot.unregistered()) {
            // Not written by a map task there: migrated there when another executor was
            // decommissioned (the engine moved the files, not a registration), or lost.
            return BlockFetcher.NOT_IN_TABLE;
        }
        if (r.mapId() != Request.ANY_MAP_ID && slot.mapId() != r.mapId()) {
            // Another attempt of the map replaced it in the table (a retried or zombie attempt on the
            // same executor); the attempt the tracker names may still be on disk: the engine's path reads
            // it by its id, or fails the fetch if it is gone.
            return "another attempt of the map replaced it in the peer's table";
        }
        if (slot.unregistered()) {
            return BlockFetcher.LEFT_UNREGISTERED; // committed, left to the engine's path by the peer
        }
        return null;
    }

    /**
     * Checks a slot's metadata length before a buffer is taken for it: with the shuffle's partition
     * count known, the metadata is exactly a header, the slot's regions and one offset per partition
     * boundary ({@link ShuffleOutputTable}); else it must fit one buffer. Wrong, the slot may be torn.
     */
    static String metadataLength(Request r, int regionCount, long lengthBytes) {
        if (regionCount > ShuffleOutputTable.MAX_REGIONS) {
            return regionCount + " regions, more than any map output has (" + ShuffleOutputTable.MAX_REGIONS + ")";
        }
        int partitions = r.expected().numPartitions();
        if (partitions == Expected.UNKNOWN_PARTITIONS) {
            if (lengthBytes < ShuffleOutputTable.META_HEADER_BYTES + 8 || lengthBytes > Integer.MAX_VALUE - 8) {
                return "metadata of " + lengthBytes + " bytes";
            }
            return null;
        }
        if (regionCount < 0) {
            return regionCount + " regions";
        }
        long expected = ShuffleOutputTable.metadataBytes(regionCount, partitions);
        if (lengthBytes != expected || expected > Integer.MAX_VALUE - 8) {
            return "metadata of " + lengthBytes + " bytes, where " + regionCount + " regions and " + partitions
                    + " partitions take " + expected;
        }
        return null;
    }

    /** Whether the request's partitions lie outside what a slot's metadata can hold; the request fails. */
    static String rangeOutsideSlot(Request r, int regionCount, long headBytes, long metadataBytes) {
        if (regionCount < 0 || headBytes + (long) r.endPartition() * 8 + 8 > metadataBytes
                || r.startPartition() < 0
                || r.startPartition() > r.endPartition()) {
            return "partition range outside the map output: metadata of " + metadataBytes + " bytes for "
                    + regionCount + " regions";
        }
        return null;
    }

    /**
     * Whether a slot's header and descriptors with the request's offsets exceed what the receive pool
     * could ever give: the peer's table is wrong (or torn), not this executor.
     */
    static String beyondPool(int regionCount, long metadataReadBytes, long maxRegisteredBytes) {
        if (metadataReadBytes > maxRegisteredBytes) {
            return "corrupt output table: " + regionCount + " regions, whose descriptors alone exceed the receive "
                    + "pool's cap of " + maxRegisteredBytes + " bytes";
        }
        return null;
    }

    /** Whether landed metadata names another map attempt than its slot did: the slot READ overlapped a rewrite. */
    static String tornSlot(long slotMapId, long metadataMapId) {
        if (metadataMapId != slotMapId) {
            return "the output table slot names map attempt " + slotMapId + " but its metadata attempt "
                    + metadataMapId;
        }
        return null;
    }

    /** Whether a parsed metadata header contradicts its slot or the shuffle; its window may be torn. */
    static String header(Request r, ShuffleOutputTable.Metadata m, int headBytes) {
        if (ShuffleOutputTable.offsetPosition(m.regions().length, 0) != headBytes) {
            return "corrupt map output metadata: " + m.regions().length
                    + " regions, the output table slot names another count";
        }
        int partitions = r.expected().numPartitions();
        if (partitions != Expected.UNKNOWN_PARTITIONS && m.numPartitions() != partitions) {
            return "corrupt map output metadata: " + m.numPartitions() + " partitions in a shuffle of " + partitions;
        }
        return null;
    }

    /** Whether the request's partitions lie outside the map output's; the request fails. */
    static String partitionRange(Request r, ShuffleOutputTable.Metadata m) {
        if (r.startPartition() < 0 || r.endPartition() > m.numPartitions() || r.startPartition() > r.endPartition()) {
            return "partition range outside the map output's " + m.numPartitions();
        }
        return null;
    }

    /**
     * Reads the offsets of the step's partitions at {@code b}'s position into the step ({@code firstOffset},
     * {@code endOffset} and, for more than one partition, its {@code window}), checked against the map
     * output's length ({@link ShuffleOutputTable.Metadata#readOffsets}); a one-partition request's two
     * ends go through {@code ends}, so nothing is allocated. Wrong, the window may be torn.
     */
    static String readOffsets(FetchStep s, ByteBuffer b, ShuffleOutputTable.Metadata m, long[] ends) {
        Request r = s.request;
        int n = r.endPartition() - r.startPartition();
        long[] out = ends;
        if (n >= 2) {
            if (s.window == null) {
                s.window = new long[n + 1];
            }
            out = s.window;
        }
        try {
            m.readOffsets(b, r.startPartition(), r.endPartition(), out);
        } catch (RuntimeException e) {
            return e.getMessage();
        }
        s.firstOffset = out[0];
        s.endOffset = out[n];
        return null;
    }

    /** Whether the block's size at the peer is outside what the driver's MapOutputTracker allows; it fails. */
    static String blockSize(Request r, long bytes) {
        Expected e = r.expected();
        if (bytes < e.minBytes() || bytes > e.maxBytes()) {
            return "map output at peer does not match MapOutputTracker: partitions [" + r.startPartition() + ", "
                    + r.endPartition() + ") hold " + bytes + " bytes there, the tracker's size allows "
                    + e.minBytes() + " to " + e.maxBytes();
        }
        return null;
    }
}
