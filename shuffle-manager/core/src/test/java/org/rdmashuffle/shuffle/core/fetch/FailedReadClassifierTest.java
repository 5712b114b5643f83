package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;

/** One decision for every way a READ or a block fails ({@link FailedReadClassifier}). */
class FailedReadClassifierTest {
    private static final BlockFetcher.Request R = new BlockFetcher.Request(new NodeAddress("10.0.0.1", 4000, "tcp"),
            new RegionDescriptor(4096, 1024, 7), 2, 2, 0, 1);

    /** The peers the classifier asked about, and whether they withdrew their node. */
    /** A table lookup's request: the peer and the first block's map output, no table known yet. */
    private static final BlockFetcher.Request LOOKUP = new BlockFetcher.Request(R.peer(), null, 2, 2, 0, 1);

    private static final class Peers implements FailedReadClassifier.PeerNodes {
        final List<BlockFetcher.Request> asked = new ArrayList<>();
        final boolean withdrew;

        Peers(boolean withdrew) {
            this.withdrew = withdrew;
        }

        @Override
        public boolean withdrew(BlockFetcher.Request origin) {
            asked.add(origin);
            return withdrew;
        }
    }

    private static List<FetchFailure> everyBlame() {
        return List.of(
                new FetchFailure(R, FetchFailure.Kind.READ, "data READ failed: remote access error", null, false),
                new FetchFailure(R, FetchFailure.Kind.TIMEOUT, "no block arrived within 1000 ms", null, true),
                new FetchFailure(R, FetchFailure.Kind.TIMEOUT, "no block arrived (the window at byte 0)", null, false),
                new FetchFailure(R, FetchFailure.Kind.WINDOW, "data READ failed at byte 65536", null, false),
                new FetchFailure(R, FetchFailure.Kind.SIZE, "map output at peer does not match", null, false),
                new FetchFailure(R, FetchFailure.Kind.CORRUPT, "corrupt again after a second READ", null, false),
                new FetchFailure(R, FetchFailure.Kind.CORRUPT, "corrupt while its records were read", null, false));
    }

    @Test
    void shouldAskWhetherThePeerWithdrewItsNodeWhenItsOutputTableCannotBeLookedUp() {
        FetchFailure f = new FetchFailure(LOOKUP, FetchFailure.Kind.TABLE, "connection refused", null, false);
        Peers withdrew = new Peers(true);
        assertEquals(ReadOutcome.ENGINE_PATH, new FailedReadClassifier(() -> false, withdrew, true).failed(f));
        assertEquals(List.of(LOOKUP), withdrew.asked, "the origin asked about");
        assertEquals(ReadOutcome.BLAME_PEER, new FailedReadClassifier(() -> false, new Peers(false), true).failed(f));
        Peers notAsked = new Peers(true);
        assertEquals(ReadOutcome.BLAME_PEER, new FailedReadClassifier(() -> false, notAsked, false).failed(f),
                "no engine path allowed: the peer is blamed");
        assertEquals(List.of(), notAsked.asked, "asked about a peer although no engine path is allowed");
        Peers own = new Peers(true);
        assertEquals(ReadOutcome.OWN_NODE_FAILED, new FailedReadClassifier(() -> true, own, false).failed(f),
                "this node failed: nobody is blamed, also under fallback=never");
        assertEquals(List.of(), own.asked, "asked about a peer although this node failed");
    }

    @Test
    void shouldAskWhetherThePeerWithdrewItsNodeBeforeEveryBlameWhenATimeoutWindowSizeOrCorruptionFails() {
        for (FetchFailure f : everyBlame()) {
            Peers peers = new Peers(true);
            FailedReadClassifier c = new FailedReadClassifier(() -> false, peers, true);
            ReadOutcome outcome = f.kind() == FetchFailure.Kind.CORRUPT ? c.corrupt(f, true) : c.failed(f);
            assertEquals(ReadOutcome.ENGINE_PATH, outcome, f.kind() + " (" + f.getMessage() + ") blamed a peer that "
                    + "withdrew its node");
            assertEquals(List.of(R), peers.asked, f.kind() + ": the origin asked about");
        }
    }

    @Test
    void shouldBlameThePeerWhenItsNodeIsStillTheDirectorysAndFailWithoutBlameWhenThisNodeFailed() {
        for (FetchFailure f : everyBlame()) {
            assertEquals(ReadOutcome.BLAME_PEER, new FailedReadClassifier(() -> false, new Peers(false), true).failed(f));
            Peers peers = new Peers(true);
            assertEquals(ReadOutcome.OWN_NODE_FAILED, new FailedReadClassifier(() -> true, peers, true).failed(f));
            assertEquals(List.of(), peers.asked, "asked about a peer although this node failed");
            assertEquals(ReadOutcome.BLAME_PEER, new FailedReadClassifier(() -> false, new Peers(true), false).failed(f),
                    "no engine path allowed: the peer is blamed");
        }
    }

    @Test
    void shouldReadACorruptBlockAgainOnceBeforeDecidingWhenItIsCorruptTheFirstTime() {
        Peers peers = new Peers(true);
        FetchFailure f = new FetchFailure(R, FetchFailure.Kind.CORRUPT, "corrupt", null, false);
        assertEquals(ReadOutcome.RETRY, new FailedReadClassifier(() -> false, peers, true).corrupt(f, false));
        assertEquals(List.of(), peers.asked);
    }

    @Test
    void shouldTakeTheEnginesPathWhenThePoolGivesOutAndFailTheTaskWhenItsWaitWasInterrupted() {
        FailedReadClassifier c = new FailedReadClassifier(() -> false, new Peers(false), true);
        assertEquals(ReadOutcome.ENGINE_PATH, c.poolFailed(BufferPoolException.exhausted("at its cap")));
        assertEquals(ReadOutcome.ENGINE_PATH, c.poolFailed(new BufferPoolException("no memory", null, true)));
        assertEquals(ReadOutcome.LOCAL_FAILURE, c.poolFailed(new BufferPoolException("interrupted")));
        assertEquals(ReadOutcome.OWN_NODE_FAILED, new FailedReadClassifier(() -> true, new Peers(false), true)
                .poolFailed(new BufferPoolException("pool closed")));
        assertEquals(ReadOutcome.LOCAL_FAILURE, new FailedReadClassifier(() -> false, new Peers(false), false)
                .poolFailed(BufferPoolException.exhausted("at its cap")));
    }
}
