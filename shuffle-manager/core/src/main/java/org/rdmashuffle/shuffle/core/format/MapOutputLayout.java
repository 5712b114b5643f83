package org.rdmashuffle.shuffle.core.format;

import java.util.Arrays;
import org.rdmashuffle.conf.RdmaShuffleConf;

/**
 * Where a map output's partitions lie once its data file is registered as regions of at most
 * {@code maxRegionBytes} each, and which READs fetch a range of partitions.
 *
 * <p>The data file is cut into consecutive regions at multiples of {@code maxRegionBytes} (a Java
 * mapping holds at most 2 GiB, and a configured limit may force more regions). A byte range that
 * crosses a region boundary is read as one piece per region; a piece longer than the READ size is
 * split further. Immutable.
 */
public final class MapOutputLayout {
    private final long[] partitionOffsets;
    private final long maxRegionBytes;
    private final int regionCount;

    /**
     * @param partitionOffsets offsets from the index file: {@code numPartitions + 1} non-decreasing
     *     values starting at 0, the last being the data file's length
     * @param maxRegionBytes the most one region may cover
     */
    public MapOutputLayout(long[] partitionOffsets, long maxRegionBytes) {
        if (partitionOffsets.length < 1 || partitionOffsets[0] != 0) {
            throw new IllegalArgumentException("partition offsets must start at 0: " + Arrays.toString(
                    Arrays.copyOf(partitionOffsets, Math.min(4, partitionOffsets.length))));
        }
        for (int i = 1; i < partitionOffsets.length; i++) {
            if (partitionOffsets[i] < partitionOffsets[i - 1]) {
                throw new IllegalArgumentException("partition offsets decrease at partition " + (i - 1) + ": "
                        + partitionOffsets[i - 1] + " then " + partitionOffsets[i]);
            }
        }
        if (maxRegionBytes < 1 || maxRegionBytes > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("region size limit out of range: " + maxRegionBytes);
        }
        this.partitionOffsets = partitionOffsets.clone();
        this.maxRegionBytes = maxRegionBytes;
        long total = totalBytes();
        long regions = (total + maxRegionBytes - 1) / maxRegionBytes;
        if (regions > ShuffleOutputTable.MAX_REGIONS) {
            throw new IllegalArgumentException("a map output of " + total + " bytes in regions of " + maxRegionBytes
                    + " bytes takes " + regions + " regions, more than " + ShuffleOutputTable.MAX_REGIONS
                    + " (raise " + RdmaShuffleConf.MAX_REGION_SIZE.name() + ")");
        }
        this.regionCount = (int) regions;
    }

    public int numPartitions() {
        return partitionOffsets.length - 1;
    }

    /** The data file's length. */
    public long totalBytes() {
        return partitionOffsets[partitionOffsets.length - 1];
    }

    /** Regions the data file is registered as (0 for an empty output). */
    public int regionCount() {
        return regionCount;
    }

    /** Where region {@code r} starts in the data file. */
    public long regionStart(int r) {
        checkRegion(r);
        return r * maxRegionBytes;
    }

    /** Region {@code r}'s length in bytes. */
    public int regionLength(int r) {
        checkRegion(r);
        return (int) (Math.min(totalBytes(), (r + 1) * maxRegionBytes) - r * maxRegionBytes);
    }

    private void checkRegion(int r) {
        if (r < 0 || r >= regionCount) {
            throw new IndexOutOfBoundsException("region " + r + " of " + regionCount);
        }
    }

    /** Where partition {@code partition} starts in the data file ({@code numPartitions}: its length). */
    public long offset(int partition) {
        checkRange(partition, partition);
        return partitionOffsets[partition];
    }

    /** Bytes of partitions {@code [start, end)}. */
    public long bytesOf(int startPartition, int endPartition) {
        checkRange(startPartition, endPartition);
        return partitionOffsets[endPartition] - partitionOffsets[startPartition];
    }

    private void checkRange(int start, int end) {
        if (start < 0 || end > numPartitions() || start > end) {
            throw new IndexOutOfBoundsException("partitions [" + start + ", " + end + ") of " + numPartitions());
        }
    }

    /** Receives one READ piece: region index, offset inside it, length. */
    @FunctionalInterface
    public interface PieceConsumer {
        void accept(int region, int offsetInRegion, int length);
    }

    /**
     * Emits the READs that fetch partitions {@code [start, end)}, in file order: never crossing a
     * region boundary, none longer than {@code maxReadBytes}. Allocates nothing.
     *
     * @return the number of pieces emitted (0 when the range is empty)
     */
    public int forEachPiece(int startPartition, int endPartition, int maxReadBytes, PieceConsumer out) {
        checkRange(startPartition, endPartition);
        if (maxReadBytes < 1) {
            throw new IllegalArgumentException("READ size must be positive: " + maxReadBytes);
        }
        return forEachPiece(partitionOffsets[startPartition], partitionOffsets[endPartition], maxRegionBytes,
                maxReadBytes, out);
    }

    /**
     * Emits the READs that fetch bytes {@code [from, to)} of a data file registered as regions of
     * {@code maxRegionBytes} each, in file order: never crossing a region boundary, none longer than
     * {@code maxReadBytes}. Allocates nothing.
     *
     * @return the number of pieces emitted (0 when the range is empty)
     */
    public static int forEachPiece(long from, long to, long maxRegionBytes, int maxReadBytes, PieceConsumer out) {
        if (maxReadBytes < 1 || maxRegionBytes < 1 || from < 0 || to < from) {
            throw new IllegalArgumentException("READ size " + maxReadBytes + ", regions of " + maxRegionBytes
                    + ", bytes [" + from + ", " + to + ")");
        }
        long pos = from;
        long end = to;
        int pieces = 0;
        while (pos < end) {
            int region = (int) (pos / maxRegionBytes);
            long regionEnd = Math.min(end, (region + 1) * maxRegionBytes);
            int len = (int) Math.min(regionEnd - pos, maxReadBytes);
            out.accept(region, (int) (pos - region * maxRegionBytes), len);
            pos += len;
            pieces++;
        }
        return pieces;
    }
}
