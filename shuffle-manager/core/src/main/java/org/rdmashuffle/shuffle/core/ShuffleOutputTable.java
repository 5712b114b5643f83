package org.rdmashuffle.shuffle.core;

import java.io.IOException;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * An executor's registered output table for one shuffle: one fixed-size slot per map index, which
 * reducers READ to learn where a map output's regions and partition offsets are, with nothing
 * running on this executor per request.
 *
 * <p>Slot ({@link #SLOT_BYTES} bytes, big-endian): {@code state u32} (0 empty, 1 published, 2 committed
 * but not registered: read it through Spark's own shuffle path),
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
 * <p>Publishing and removing are serialised by this object's monitor; reads come from the transport.
 */
public final class ShuffleOutputTable implements AutoCloseable {
    public static final int SLOT_BYTES = 32;
    /**
     * The most regions one map output may have: a writer leaves a larger output to the engine's path
     * ({@link MapOutputLayout}), and a reader refuses metadata that claims more before it allocates a
     * descriptor for each — a lying peer could otherwise claim millions of 1-byte regions and fill the
     * reader's heap. 65,536 regions of the default 1 GiB are 64 TiB; of the smallest, 4 KiB, 256 MiB.
     */
    public static final int MAX_REGIONS = 1 << 16;
    static final int META_HEADER_BYTES = 24;
    static final int STATE_EMPTY = 0;
    static final int STATE_PUBLISHED = 1;
    static final int STATE_UNREGISTERED = 2;

    private final RdmaNode node;
    private final int shuffleId;
    private final int numMaps;
    private final ByteBuffer slots;
    private final MemoryRegion slotsRegion;
    private final MemoryRegion[] metadata;
    private final RegisteredMapOutput[] outputs;
    /** The realm whose connections may READ this table's regions (a MapReduce job), or null: every peer. */
    private final String realm;
    /** Bytes of the outputs registered here now (kept as they come and go: reading it costs no walk). */
    private long registeredBytes;
    /** Set by {@link #withdraw}: no peer finds the table any more, and nothing is published into it. */
    private boolean withdrawn;
    private boolean closed;

    public ShuffleOutputTable(RdmaNode node, int shuffleId, int numMaps) throws IOException {
        this(node, shuffleId, numMaps, null);
    }

    /**
     * A table whose regions — slots, metadata and every output published in it — only connections
     * authenticated for {@code realm} may READ (null: any peer of the node).
     */
    public ShuffleOutputTable(RdmaNode node, int shuffleId, int numMaps, String realm) throws IOException {
        if (numMaps < 0) {
            throw new IllegalArgumentException("numMaps < 0: " + numMaps);
        }
        this.node = node;
        this.shuffleId = shuffleId;
        this.numMaps = numMaps;
        this.realm = realm;
        this.slots = ByteBuffer.allocateDirect(Math.max(1, numMaps) * SLOT_BYTES);
        this.slotsRegion = node.register(slots, RegionAccess.REMOTE_READ, realm);
        this.metadata = new MemoryRegion[numMaps];
        this.outputs = new RegisteredMapOutput[numMaps];
    }

    public int shuffleId() {
        return shuffleId;
    }

    /** The realm whose connections may READ this table, or null for every peer. */
    public String realm() {
        return realm;
    }

    /** Length of the metadata region of a map output of {@code regionCount} regions and {@code numPartitions}. */
    static long metadataBytes(int regionCount, int numPartitions) {
        return META_HEADER_BYTES + (long) regionCount * RegionDescriptor.ENCODED_BYTES + (numPartitions + 1L) * 8;
    }

    /** Where partition {@code partition}'s offset lies in a metadata region of {@code regionCount} regions. */
    static long offsetPosition(int regionCount, int partition) {
        return META_HEADER_BYTES + (long) regionCount * RegionDescriptor.ENCODED_BYTES + (long) partition * 8;
    }

    /** The table's region, which reducers READ slots from ({@code mapIndex * SLOT_BYTES}). */
    public RegionDescriptor descriptor() {
        return slotsRegion.descriptor();
    }

    /**
     * Publishes {@code output} as map index {@code mapIndex}; the table owns it from now on (a
     * previous output of the same index, e.g. an earlier attempt, is released).
     */
    public synchronized void publish(int mapIndex, long mapId, RegisteredMapOutput output) throws IOException {
        checkIndex(mapIndex);
        if (closed || withdrawn) {
            output.close();
            throw new IllegalStateException("output table of shuffle " + shuffleId + " is closed");
        }
        int regions = output.regionCount();
        ByteBuffer meta = output.takeMetadata(mapId); // the offsets live here from now on, not on the heap
        MemoryRegion metaRegion;
        try {
            metaRegion = node.register(meta, RegionAccess.REMOTE_READ, realm);
        } catch (IOException | RuntimeException e) {
            output.close();
            throw e;
        }
        remove(mapIndex);
        metadata[mapIndex] = metaRegion;
        outputs[mapIndex] = output;
        registeredBytes += output.registeredBytes();
        int at = mapIndex * SLOT_BYTES;
        RegionDescriptor d = metaRegion.descriptor();
        slots.putInt(at + 4, regions).putLong(at + 8, mapId).putLong(at + 16, d.address()).putInt(at + 24, d.rkey())
                .putInt(at + 28, (int) d.length());
        VarHandle.releaseFence();
        slots.putInt(at, STATE_PUBLISHED);
    }

    /**
     * Says that map index {@code mapIndex}'s attempt {@code mapId} is committed but not registered:
     * reducers fetch it through Spark's own shuffle path (a previous output of the index is released).
     */
    public synchronized void publishUnregistered(int mapIndex, long mapId) {
        checkIndex(mapIndex);
        if (closed || withdrawn) {
            throw new IllegalStateException("output table of shuffle " + shuffleId + " is closed");
        }
        remove(mapIndex);
        int at = mapIndex * SLOT_BYTES;
        slots.putInt(at + 4, 0).putLong(at + 8, mapId).putLong(at + 16, 0).putInt(at + 24, 0).putInt(at + 28, 0);
        VarHandle.releaseFence();
        slots.putInt(at, STATE_UNREGISTERED);
    }

    /** Withdraws map index {@code mapIndex} (its rkeys fail from now on) and releases its output. */
    public synchronized void remove(int mapIndex) {
        checkIndex(mapIndex);
        slots.putInt(mapIndex * SLOT_BYTES, STATE_EMPTY);
        VarHandle.fullFence();
        if (metadata[mapIndex] != null) {
            metadata[mapIndex].close();
            metadata[mapIndex] = null;
        }
        if (outputs[mapIndex] != null) {
            registeredBytes -= outputs[mapIndex].registeredBytes();
            RegisteredMapOutput o = outputs[mapIndex];
            outputs[mapIndex] = null;
            o.close();
        }
    }

    /** Bytes of map outputs this table holds registered. */
    public synchronized long registeredOutputBytes() {
        return registeredBytes;
    }

    private void checkIndex(int mapIndex) {
        if (mapIndex < 0 || mapIndex >= numMaps) {
            throw new IndexOutOfBoundsException("map index " + mapIndex + " of " + numMaps + " in shuffle " + shuffleId);
        }
    }

    /**
     * Deregisters the table's own region, so that no peer finds any output through it from now on, and refuses
     * later publishing; the outputs stay registered until {@link #close} (which may run on another thread
     * later: withdrawing costs O(1), closing O(outputs)). Idempotent.
     */
    public synchronized void withdraw() {
        withdrawn = true;
        slotsRegion.close();
    }

    /** Withdraws every output, then deregisters the table (reverse order of creation). Idempotent. */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        for (int i = numMaps - 1; i >= 0; i--) {
            remove(i);
        }
        slotsRegion.close();
    }

    /**
     * A slot as a reducer READ it.
     *
     * @param published whether a registered map output is there
     * @param unregistered whether a map output is there that is not registered (Spark's path serves it)
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
