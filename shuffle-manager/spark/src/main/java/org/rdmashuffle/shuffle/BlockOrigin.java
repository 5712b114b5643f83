package org.rdmashuffle.shuffle;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.storage.BlockId;
import org.apache.spark.storage.BlockManagerId;
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

    /** The tracker's entries of {@code blocks}, in order. */
    static List<Tuple3<BlockId, Object, Object>> tracked(List<BlockOrigin> blocks) {
        List<Tuple3<BlockId, Object, Object>> out = new ArrayList<>(blocks.size());
        for (BlockOrigin o : blocks) {
            out.add(o.tracked());
        }
        return out;
    }
}
