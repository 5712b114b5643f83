package org.rdmashuffle.shuffle;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.storage.BlockId;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.storage.ShuffleBlockBatchId;
import org.apache.spark.storage.ShuffleBlockId;
import org.rdmashuffle.transport.NodeAddress;
import scala.Tuple3;

/**
 * Where a block of a reduce task comes from, for metrics and for the FetchFailedException that names it, and
 * the size the MapOutputTracker reports for it. {@code peer} is its executor's node: null for a local block,
 * and for a remote one before the node is looked up. {@code tracked} is the tracker's own entry, handed to
 * Spark's fetcher when the block goes through Spark's path.
 */
record BlockOrigin(BlockManagerId address, NodeAddress peer, ShuffleBlockId blockId, int mapIndex,
                   long reportedBytes, Tuple3<BlockId, Object, Object> tracked) {

    /** This block at {@code node}, its executor's node looked up. */
    BlockOrigin at(NodeAddress node) {
        return new BlockOrigin(address, node, blockId, mapIndex, reportedBytes, tracked);
    }

    /**
     * {@code blocks} cut into what is fetched and decoded as one block: with {@code batch} ({@link
     * SparkInterop#batchFetch}) each run of one map output's consecutive blocks, as Spark's reader merges
     * them (the tracker lists a map output's blocks together, by reduce id); else each block alone.
     */
    static List<List<BlockOrigin>> units(List<BlockOrigin> blocks, boolean batch) {
        List<List<BlockOrigin>> out = new ArrayList<>();
        List<BlockOrigin> run = null;
        for (BlockOrigin o : blocks) {
            if (batch && run != null && continues(run.get(run.size() - 1), o)) {
                run.add(o);
            } else {
                run = new ArrayList<>(batch ? 4 : 1);
                run.add(o);
                out.add(run);
            }
        }
        return out;
    }

    /** Whether {@code next} follows {@code last} in the same map output's data file. */
    private static boolean continues(BlockOrigin last, BlockOrigin next) {
        return next.address().equals(last.address()) && next.blockId().mapId() == last.blockId().mapId()
                && next.blockId().reduceId() > last.blockId().reduceId();
    }

    /** The block id Spark names a unit of {@link #units} by: the block's own, or a batch of them. */
    static BlockId unitId(List<BlockOrigin> unit) {
        ShuffleBlockId first = unit.get(0).blockId();
        return unit.size() == 1 ? first : new ShuffleBlockBatchId(first.shuffleId(), first.mapId(),
                first.reduceId(), unit.get(unit.size() - 1).blockId().reduceId() + 1);
    }

    /** The tracker's entries of {@code blocks}, in order. */
    static List<Tuple3<BlockId, Object, Object>> tracked(List<BlockOrigin> blocks) {
        List<Tuple3<BlockId, Object, Object>> out = new ArrayList<>(blocks.size());
        for (BlockOrigin o : blocks) {
            out.add(o.tracked());
        }
        return out;
    }
}
