package org.rdmashuffle.shuffle.core.serve;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * One committed map output's data file, mapped read-only and registered with a node as the regions
 * its {@link MapOutputLayout} prescribes. Closing deregisters (and unmaps) them in reverse order; a
 * failure part-way through registration releases what was registered and rethrows.
 *
 * <p>Its partition offsets are held until {@link #takeMetadata} encodes them into the metadata region's
 * buffer when the output is published; from then on only that buffer holds them (one copy per map
 * output, off the heap), and this object keeps the data file's length.
 */
public final class RegisteredMapOutput implements AutoCloseable {
    private MapOutputLayout layout;
    private final long totalBytes;
    private final List<MemoryRegion> regions;

    private RegisteredMapOutput(MapOutputLayout layout, List<MemoryRegion> regions) {
        this.layout = layout;
        this.totalBytes = layout.totalBytes();
        this.regions = regions;
    }

    /** Registers {@code dataFile} (whose partition offsets are in {@code layout}) with {@code node}. */
    public static RegisteredMapOutput register(RdmaNode node, Path dataFile, MapOutputLayout layout) throws IOException {
        return register(node, dataFile, layout, null);
    }

    /** As {@link #register(RdmaNode, Path, MapOutputLayout)}, READable only by connections of {@code realm}. */
    public static RegisteredMapOutput register(RdmaNode node, Path dataFile, MapOutputLayout layout, String realm)
            throws IOException {
        return register(layout, (start, length) -> node.registerFile(dataFile, start, length, realm));
    }

    /**
     * As {@link #register(RdmaNode, Path, MapOutputLayout, String)}, from a data file the caller opened (and
     * checked): exactly that file's bytes are registered, whatever its path names by now. The caller closes
     * {@code dataFile}; the regions do not need it.
     */
    public static RegisteredMapOutput register(RdmaNode node, FileChannel dataFile, String name,
                                               MapOutputLayout layout, String realm) throws IOException {
        return register(layout, (start, length) -> node.registerFile(dataFile, name, start, length, realm));
    }

    /** Registers one region of the data file. */
    private interface RegionRegistrar {
        MemoryRegion register(long start, int length) throws IOException;
    }

    private static RegisteredMapOutput register(MapOutputLayout layout, RegionRegistrar registrar)
            throws IOException {
        List<MemoryRegion> regions = new ArrayList<>(layout.regionCount());
        try {
            for (int r = 0; r < layout.regionCount(); r++) {
                regions.add(registrar.register(layout.regionStart(r), layout.regionLength(r)));
            }
        } catch (IOException | RuntimeException e) {
            closeAll(regions, e);
            throw e;
        }
        return new RegisteredMapOutput(layout, List.copyOf(regions));
    }

    /**
     * The layout, until the output is published.
     *
     * @throws IllegalStateException once {@link #takeMetadata} took the offsets
     */
    public MapOutputLayout layout() {
        if (layout == null) {
            throw new IllegalStateException("published: the offsets live in the metadata region only");
        }
        return layout;
    }

    /**
     * Encodes the metadata region's bytes (layout in {@link ShuffleOutputTable}) for attempt {@code mapId}
     * into a new direct buffer and drops the heap copy of the offsets; once only.
     */
    synchronized java.nio.ByteBuffer takeMetadata(long mapId) {
        MapOutputLayout l = layout();
        int count = regions.size();
        java.nio.ByteBuffer meta = java.nio.ByteBuffer.allocateDirect(
                Math.toIntExact(ShuffleOutputTable.metadataBytes(count, l.numPartitions())));
        meta.putInt(count).putInt(l.numPartitions()).putLong(count == 0 ? 0 : l.regionLength(0)).putLong(mapId);
        for (int r = 0; r < count; r++) {
            region(r).writeTo(meta);
        }
        for (int p = 0; p <= l.numPartitions(); p++) {
            meta.putLong(l.offset(p));
        }
        layout = null;
        return meta.clear();
    }

    /** The descriptor peers READ region {@code r} with. */
    public RegionDescriptor region(int r) {
        return regions.get(r).descriptor();
    }

    public int regionCount() {
        return regions.size();
    }

    /** Registered bytes (the data file's length). */
    public long registeredBytes() {
        return totalBytes;
    }

    @Override
    public void close() {
        closeAll(regions, null);
    }

    private static void closeAll(List<MemoryRegion> regions, Throwable primary) {
        RuntimeException first = null;
        for (int i = regions.size() - 1; i >= 0; i--) {
            try {
                regions.get(i).close();
            } catch (RuntimeException e) {
                if (primary != null) {
                    primary.addSuppressed(e);
                } else if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }
}
