package org.rdmashuffle.shuffle;

import java.io.File;
import java.io.IOException;
import org.apache.spark.scheduler.MapStatus;
import org.apache.spark.shuffle.ShuffleWriter;
import scala.Option;
import scala.Product2;
import scala.collection.Iterator;

/**
 * Spark's own sort-based writer, then — once the map output is committed — its data file is
 * registered as regions and published in the executor's output table (or, past the executor's
 * registration cap or when registering fails, published as left to Spark's own path).
 */
final class RdmaShuffleWriter<K, V> extends ShuffleWriter<K, V> {
    private final ShuffleWriter<K, V> sortWriter;
    private final RdmaShuffleManager manager;
    private final RdmaShuffleHandle handle;
    private final long mapId;
    private final int mapIndex;

    RdmaShuffleWriter(ShuffleWriter<K, V> sortWriter, RdmaShuffleManager manager, RdmaShuffleHandle handle, long mapId,
                      int mapIndex) {
        this.sortWriter = sortWriter;
        this.manager = manager;
        this.handle = handle;
        this.mapId = mapId;
        this.mapIndex = mapIndex;
    }

    @Override
    public void write(Iterator<Product2<K, V>> records) throws IOException {
        sortWriter.write(records);
    }

    @Override
    public Option<MapStatus> stop(boolean success) {
        Option<MapStatus> status = sortWriter.stop(success);
        if (success && status.isDefined()) {
            long[] lengths = sortWriter.getPartitionLengths();
            long[] offsets = new long[lengths.length + 1];
            for (int i = 0; i < lengths.length; i++) {
                offsets[i + 1] = offsets[i] + lengths[i];
            }
            ExecutorRuntime rt = manager.runtime();
            if (rt == null) {
                return status; // this executor fell back (logged once): readers use Spark's reader for it
            }
            File data = manager.dataFile(handle.shuffleId(), mapId);
            rt.server.publish(handle.shuffleId(), handle.numMaps(), mapIndex, mapId, data, offsets);
        }
        return status;
    }

    @Override
    public long[] getPartitionLengths() {
        return sortWriter.getPartitionLengths();
    }
}
