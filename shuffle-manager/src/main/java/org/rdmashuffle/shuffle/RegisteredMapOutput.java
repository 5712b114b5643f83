package org.rdmashuffle.shuffle;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * One committed map output's data file, mapped read-only and registered with a node as the regions
 * its {@link MapOutputLayout} prescribes. Closing deregisters (and unmaps) them in reverse order; a
 * failure part-way through registration releases what was registered and rethrows.
 */
public final class RegisteredMapOutput implements AutoCloseable {
    private final MapOutputLayout layout;
    private final List<MemoryRegion> regions;

    private RegisteredMapOutput(MapOutputLayout layout, List<MemoryRegion> regions) {
        this.layout = layout;
        this.regions = regions;
    }

    /** Registers {@code dataFile} (whose partition offsets are in {@code layout}) with {@code node}. */
    public static RegisteredMapOutput register(RdmaNode node, Path dataFile, MapOutputLayout layout) throws IOException {
        List<MemoryRegion> regions = new ArrayList<>(layout.regionCount());
        try {
            for (int r = 0; r < layout.regionCount(); r++) {
                regions.add(node.registerFile(dataFile, layout.regionStart(r), layout.regionLength(r)));
            }
        } catch (IOException | RuntimeException e) {
            closeAll(regions, e);
            throw e;
        }
        return new RegisteredMapOutput(layout, List.copyOf(regions));
    }

    public MapOutputLayout layout() {
        return layout;
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
        return layout.totalBytes();
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
