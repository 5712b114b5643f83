package org.rdmashuffle.shuffle;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.SparkConf;
import org.apache.spark.storage.BlockManagerId;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * Builds the requests a reduce task hands its {@link BlockFetcher} from the blocks the MapOutputTracker lists:
 * which blocks of a map output go together ({@link #runs}), the request for such a run ({@link #request}) or for a
 * block READ again ({@link #again}), and the most bytes the tracker allows each block ({@link #mostBytes}). Knows
 * nothing of failures. Task thread only.
 */
final class RequestPlanner {
    private final int numPartitions;
    private final SparkConf sparkConf;
    /** The output table of each peer READ from. */
    private final Map<BlockManagerId, RegionDescriptor> tables;
    /** Bytes (the tracker's upper bounds) one request for several blocks of a map output covers at most. */
    private final long rangeBytes;
    /** The executor of each peer node a request was built for. */
    private final Map<NodeAddress, String> peerIds = new HashMap<>();

    RequestPlanner(int numPartitions, SparkConf sparkConf, Map<BlockManagerId, RegionDescriptor> tables,
                   long rangeBytes) {
        this.numPartitions = numPartitions;
        this.sparkConf = sparkConf;
        this.tables = tables;
        this.rangeBytes = rangeBytes;
    }

    /**
     * The runs of {@code remote} that go in one request each. A map output's blocks of this task's partitions
     * lie one after the other in its data file: one request fetches a run of them (AQE coalescing), up to a
     * buffer's worth by the most bytes the tracker allows each block — not its reported size: past
     * spark.shuffle.minNumPartitionsToHighlyCompress a MapStatus reports the map's average for every block
     * under the accurate-size threshold, and a run grouped by averages could hold gigabytes. There every
     * block goes alone, as before merging.
     */
    List<List<BlockOrigin>> runs(List<BlockOrigin> remote) {
        Map<List<Object>, List<BlockOrigin>> byOutput = new LinkedHashMap<>();
        for (BlockOrigin o : remote) {
            byOutput.computeIfAbsent(List.of(o.address(), o.mapIndex(), o.blockId().mapId()),
                    k -> new ArrayList<>()).add(o);
        }
        List<List<BlockOrigin>> runs = new ArrayList<>();
        for (List<BlockOrigin> blocks : byOutput.values()) {
            blocks.sort(Comparator.comparingInt(o -> o.blockId().reduceId()));
            long[] bounds = new long[blocks.size()];
            for (int i = 0; i < bounds.length; i++) {
                bounds[i] = mostBytes(blocks.get(i));
            }
            int from = 0;
            for (int to : RdmaShuffleReader.runEnds(bounds, rangeBytes)) {
                runs.add(blocks.subList(from, to));
                from = to;
            }
        }
        return runs;
    }

    /** The most bytes the tracker allows block {@code o}; never 0, as empty blocks are not fetched. */
    long mostBytes(BlockOrigin o) {
        return SparkInterop.mostBytesOfBlock(o.reportedBytes(), numPartitions, sparkConf);
    }

    /**
     * The request for {@code blocks}: consecutive blocks (by reduce id) of one map output, whose partitions from
     * the first to the last lie one after the other in its data file. Partitions between them that the tracker
     * reports empty must hold no bytes at the peer ({@link TakenBlock} checks).
     */
    BlockFetcher.Request request(List<BlockOrigin> blocks) {
        BlockOrigin first = blocks.get(0);
        long most = 0;
        for (BlockOrigin o : blocks) {
            long m = mostBytes(o);
            most = m > Long.MAX_VALUE - most ? Long.MAX_VALUE : most + m;
        }
        // Reported sizes are never 0 here (empty blocks are skipped), and a MapStatus reports 0 only for
        // empty blocks: each block holds at least one byte.
        BlockFetcher.Expected expected = new BlockFetcher.Expected(numPartitions, blocks.size(), most);
        BlockFetcher.Request r = new BlockFetcher.Request(first.peer(), tables.get(first.address()),
                first.mapIndex(), first.blockId().mapId(), first.blockId().reduceId(),
                blocks.get(blocks.size() - 1).blockId().reduceId() + 1, expected);
        peerIds.putIfAbsent(first.peer(), first.address().executorId());
        return r;
    }

    /** The request that READs {@code unit} (the blocks of a corrupt block, decoded as one) once more, alone. */
    BlockFetcher.Request again(List<BlockOrigin> unit) {
        BlockOrigin o = unit.get(0);
        long most = 0;
        for (BlockOrigin u : unit) {
            most += mostBytes(u);
        }
        return new BlockFetcher.Request(o.peer(), tables.get(o.address()), o.mapIndex(), o.blockId().mapId(),
                o.blockId().reduceId(), unit.get(unit.size() - 1).blockId().reduceId() + 1,
                new BlockFetcher.Expected(numPartitions, unit.size(), most));
    }

    /** The executor of the peer node {@code peer} a request was built for, or null. */
    String executorOf(NodeAddress peer) {
        return peerIds.get(peer);
    }
}
