package org.rdmashuffle.shuffle;

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
 * ({@code u64}). A slot's state is written last, after a release fence, so a reader that sees
 * "published" sees the rest — unless its READ of the 32 bytes overlapped a rewrite of the slot (a
 * READ is not atomic): the metadata repeats the map id, so a reader can tell a torn slot from a
 * good one and READ it again.
 *
 * <p>Publishing and removing are serialised by this object's monitor; reads come from the transport.
 */
public final class ShuffleOutputTable implements AutoCloseable {
    public static final int SLOT_BYTES = 32;
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
    private boolean closed;

    public ShuffleOutputTable(RdmaNode node, int shuffleId, int numMaps) throws IOException {
        if (numMaps < 0) {
            throw new IllegalArgumentException("numMaps < 0: " + numMaps);
        }
        this.node = node;
        this.shuffleId = shuffleId;
        this.numMaps = numMaps;
        this.slots = ByteBuffer.allocateDirect(Math.max(1, numMaps) * SLOT_BYTES);
        this.slotsRegion = node.register(slots, RegionAccess.REMOTE_READ);
        this.metadata = new MemoryRegion[numMaps];
        this.outputs = new RegisteredMapOutput[numMaps];
    }

    public int shuffleId() {
        return shuffleId;
    }

    /** Length of the metadata region of a map output of {@code regionCount} regions and {@code numPartitions}. */
    static long metadataBytes(int regionCount, int numPartitions) {
        return META_HEADER_BYTES + (long) regionCount * RegionDescriptor.ENCODED_BYTES + (numPartitions + 1L) * 8;
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
        if (closed) {
            output.close();
            throw new IllegalStateException("output table of shuffle " + shuffleId + " is closed");
        }
        MapOutputLayout l = output.layout();
        int regions = output.regionCount();
        ByteBuffer meta = ByteBuffer.allocateDirect(Math.toIntExact(metadataBytes(regions, l.numPartitions())));
        meta.putInt(regions).putInt(l.numPartitions()).putLong(regions == 0 ? 0 : l.regionLength(0)).putLong(mapId);
        for (int r = 0; r < regions; r++) {
            output.region(r).writeTo(meta);
        }
        for (int p = 0; p <= l.numPartitions(); p++) {
            meta.putLong(p == 0 ? 0 : l.bytesOf(0, p));
        }
        meta.clear();
        MemoryRegion metaRegion;
        try {
            metaRegion = node.register(meta, RegionAccess.REMOTE_READ);
        } catch (IOException | RuntimeException e) {
            output.close();
            throw e;
        }
        remove(mapIndex);
        metadata[mapIndex] = metaRegion;
        outputs[mapIndex] = output;
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
        if (closed) {
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
            outputs[mapIndex].close();
            outputs[mapIndex] = null;
        }
    }

    /** Bytes of map outputs this table holds registered. */
    public synchronized long registeredOutputBytes() {
        long sum = 0;
        for (RegisteredMapOutput o : outputs) {
            if (o != null) {
                sum += o.registeredBytes();
            }
        }
        return sum;
    }

    private void checkIndex(int mapIndex) {
        if (mapIndex < 0 || mapIndex >= numMaps) {
            throw new IndexOutOfBoundsException("map index " + mapIndex + " of " + numMaps + " in shuffle " + shuffleId);
        }
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
     * A map output's metadata as a reducer READ it: its layout and region descriptors.
     *
     * @param layout partition offsets and region split
     * @param regions descriptors of the output's regions, in file order
     * @param mapId the map task attempt it belongs to (the slot that pointed here must name the same)
     */
    public record Metadata(MapOutputLayout layout, RegionDescriptor[] regions, long mapId) {
        /** Parses a whole metadata region's bytes from {@code b}'s position. */
        public static Metadata parse(ByteBuffer b) {
            ByteBuffer m = b.duplicate();
            if (m.remaining() < META_HEADER_BYTES) {
                throw new IllegalArgumentException("corrupt map output metadata: " + m.remaining() + " bytes");
            }
            int regionCount = m.getInt();
            int numPartitions = m.getInt();
            long maxRegion = m.getLong();
            long mapId = m.getLong();
            if (regionCount < 0 || numPartitions < 0
                    || m.remaining() < (long) regionCount * RegionDescriptor.ENCODED_BYTES + (numPartitions + 1L) * 8) {
                throw new IllegalArgumentException("corrupt map output metadata: " + regionCount + " regions, "
                        + numPartitions + " partitions in " + b.remaining() + " bytes");
            }
            RegionDescriptor[] regions = new RegionDescriptor[regionCount];
            for (int r = 0; r < regionCount; r++) {
                regions[r] = RegionDescriptor.readFrom(m);
            }
            long[] offsets = new long[numPartitions + 1];
            for (int p = 0; p <= numPartitions; p++) {
                offsets[p] = m.getLong();
            }
            MapOutputLayout layout = new MapOutputLayout(offsets, regionCount == 0 ? Integer.MAX_VALUE : maxRegion);
            if (layout.regionCount() != regionCount) {
                throw new IllegalArgumentException("corrupt map output metadata: " + regionCount
                        + " regions listed, " + layout.regionCount() + " implied");
            }
            return new Metadata(layout, regions, mapId);
        }
    }
}
