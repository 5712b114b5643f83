package org.rdmashuffle.shuffle;

import org.apache.spark.ShuffleDependency;
import org.apache.spark.shuffle.BaseShuffleHandle;
import org.apache.spark.shuffle.ShuffleHandle;

/** Spark's sort-shuffle handle (which picks the writer) plus what executors need that it lacks: the map count. */
public final class RdmaShuffleHandle extends ShuffleHandle {
    private static final long serialVersionUID = 1L;
    private final ShuffleHandle sortHandle;
    private final int numMaps;

    RdmaShuffleHandle(ShuffleHandle sortHandle, int numMaps) {
        super(sortHandle.shuffleId());
        this.sortHandle = sortHandle;
        this.numMaps = numMaps;
    }

    ShuffleHandle sortHandle() {
        return sortHandle;
    }

    int numMaps() {
        return numMaps;
    }

    @SuppressWarnings("unchecked")
    <K, V, C> ShuffleDependency<K, V, C> dependency() {
        return (ShuffleDependency<K, V, C>) ((BaseShuffleHandle<?, ?, ?>) sortHandle).dependency();
    }
}
