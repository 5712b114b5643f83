package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.List;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.storage.ShuffleBlockId;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;
import scala.Option;

/** The origin a fetch failure blames is the block its request names, never another one. */
class RequestOriginsTest {
    private static final NodeAddress FROZEN = new NodeAddress("10.0.0.1", 4000, "tcp");
    private static final NodeAddress HEALTHY = new NodeAddress("10.0.0.2", 4000, "tcp");
    private static final RegionDescriptor TABLE = new RegionDescriptor(4096, 1024, 7);

    private static BlockOrigin origin(String executor, NodeAddress peer, int mapIndex) {
        return new BlockOrigin(BlockManagerId.apply(executor, peer.host(), 7337, Option.empty()), peer,
                new ShuffleBlockId(3, mapIndex, 0), mapIndex, 100, null);
    }

    private static BlockFetcher.Request request(NodeAddress peer, int mapIndex) {
        return new BlockFetcher.Request(peer, TABLE, mapIndex, mapIndex, 0, 1);
    }

    private static FetchFailure timeout(BlockFetcher.Request r) {
        return new FetchFailure(r, FetchFailure.Kind.TIMEOUT, "no block arrived within 1000 ms", null, true);
    }

    @Test
    void shouldBlameTheStreamedBlockWhenATimeoutNamesItsWindowAfterTheBlockWasHandedOut() {
        RequestOrigins origins = new RequestOrigins();
        BlockFetcher.Request streamed = request(FROZEN, 0);
        BlockFetcher.Request other = request(HEALTHY, 1);
        BlockOrigin streamedBlock = origin("exec-frozen", FROZEN, 0);
        origins.add(streamed, List.of(streamedBlock));
        origins.add(other, List.of(origin("exec-healthy", HEALTHY, 1)));
        assertEquals(List.of(streamedBlock), origins.handedOut(streamed, true));
        // The streamed block's window is still in flight (or the block was released meanwhile): the timeout names it.
        assertEquals(streamedBlock, origins.blame(timeout(streamed)), "blamed another executor's block");
    }

    @Test
    void shouldStillNameTheStreamedBlockWhenNothingElseIsPendingWhenATimeoutNamesItsWindow() {
        RequestOrigins origins = new RequestOrigins();
        BlockFetcher.Request streamed = request(FROZEN, 0);
        BlockOrigin streamedBlock = origin("exec-frozen", FROZEN, 0);
        origins.add(streamed, List.of(streamedBlock));
        origins.handedOut(streamed, true);
        assertEquals(streamedBlock, origins.blame(timeout(streamed)));
    }

    @Test
    void shouldNameNoOriginForARequestThatWentToSparksPathInsteadOfAnArbitraryOne() {
        RequestOrigins origins = new RequestOrigins();
        BlockFetcher.Request gone = request(FROZEN, 0);
        origins.add(gone, List.of(origin("exec-frozen", FROZEN, 0)));
        origins.add(request(HEALTHY, 1), List.of(origin("exec-healthy", HEALTHY, 1)));
        origins.removePeer(FROZEN);
        assertNull(origins.blame(new FetchFailure(gone, "data READ failed", null)));
    }
}
