package org.rdmashuffle.shuffle.core.serve;

import static org.rdmashuffle.shuffle.core.format.ShuffleOutputTable.SLOT_BYTES;
import static org.rdmashuffle.shuffle.core.format.ShuffleOutputTable.STATE_EMPTY;
import static org.rdmashuffle.shuffle.core.format.ShuffleOutputTable.STATE_PUBLISHED;
import static org.rdmashuffle.shuffle.core.format.ShuffleOutputTable.STATE_UNREGISTERED;

import java.io.IOException;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * A serving process's registered output table for one shuffle, in the layout {@link ShuffleOutputTable} describes:
 * one slot per map index, written here when a map output is published or withdrawn, READ by reducers with
 * nothing running here per request. A slot's state is written last, after a release fence.
 *
 * <p>Publishing and removing are serialised by this object's monitor; reads come from the transport.
 */
public final class RegisteredOutputTable implements AutoCloseable {
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

    public RegisteredOutputTable(RdmaNode node, int shuffleId, int numMaps) throws IOException {
        this(node, shuffleId, numMaps, null);
    }

    /**
     * A table whose regions — slots, metadata and every output published in it — only connections
     * authenticated for {@code realm} may READ (null: any peer of the node).
     */
    public RegisteredOutputTable(RdmaNode node, int shuffleId, int numMaps, String realm) throws IOException {
        if (numMaps < 0) {
            throw new IllegalArgumentException("numMaps < 0: " + numMaps);
        }
        this.node = node;
        this.shuffleId = shuffleId;
        this.numMaps = numMaps;
        this.realm = realm;
        this.slots = ByteBuffer.allocateDirect(Math.toIntExact(tableBytes(numMaps)));
        this.slotsRegion = node.register(slots, RegionAccess.REMOTE_READ, realm);
        this.metadata = new MemoryRegion[numMaps];
        this.outputs = new RegisteredMapOutput[numMaps];
    }

    /** The bytes of direct memory, registered, that a table of {@code numMaps} maps takes. */
    public static long tableBytes(int numMaps) {
        return (long) Math.max(1, numMaps) * SLOT_BYTES;
    }

    /** The bytes of direct memory, registered, this table takes ({@link #tableBytes(int)}). */
    public long tableBytes() {
        return slots.capacity();
    }

    public int shuffleId() {
        return shuffleId;
    }

    /** The realm whose connections may READ this table, or null for every peer. */
    public String realm() {
        return realm;
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
     * reducers fetch it through the engine's own shuffle path (a previous output of the index is released).
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

    /**
     * The data regions of map index {@code mapIndex} when attempt {@code mapId} is what the table holds there,
     * registered; else null (another attempt, left to the engine's path, nothing, or the table withdrawn). Whoever
     * is handed these descriptors READs that attempt's bytes or nothing: {@link #publish} and {@link #remove}
     * deregister an output's regions before another attempt's slot is written, and a deregistered rkey is not
     * given to another region (the transport's rule), so a READ with them fails with {@code UNKNOWN_KEY} once the
     * attempt was replaced.
     */
    public synchronized RegionDescriptor[] dataRegions(int mapIndex, long mapId) {
        checkIndex(mapIndex);
        int at = mapIndex * SLOT_BYTES;
        if (closed || withdrawn || outputs[mapIndex] == null || slots.getInt(at) != STATE_PUBLISHED
                || slots.getLong(at + 8) != mapId) {
            return null;
        }
        RegisteredMapOutput o = outputs[mapIndex];
        RegionDescriptor[] regions = new RegionDescriptor[o.regionCount()];
        for (int r = 0; r < regions.length; r++) {
            regions[r] = o.region(r);
        }
        return regions;
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
}
