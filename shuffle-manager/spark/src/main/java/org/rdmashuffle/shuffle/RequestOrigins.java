package org.rdmashuffle.shuffle;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import org.rdmashuffle.shuffle.core.BlockFetcher;
import org.rdmashuffle.shuffle.core.FetchFailure;
import org.rdmashuffle.transport.NodeAddress;

/**
 * The Spark blocks behind each request a reduce task hands its {@link BlockFetcher}: those still to come out of
 * it, and the origin a failure concerns. Task thread only.
 */
final class RequestOrigins {
    /** The blocks of each request the fetcher has not handed out yet, in partition order. */
    private final Map<BlockFetcher.Request, List<BlockOrigin>> pending = new HashMap<>();
    private Supplier<BlockFetcher.Request> oldest = () -> null;

    void fallBackTo(Supplier<BlockFetcher.Request> oldestOutstanding) {
        this.oldest = oldestOutstanding;
    }

    void add(BlockFetcher.Request r, List<BlockOrigin> blocks) {
        pending.put(r, blocks);
    }

    /**
     * The blocks of {@code r}, whose block the fetcher handed out now ({@code streamed}: READ window by window
     * while it is decoded); null when they went elsewhere since.
     */
    List<BlockOrigin> handedOut(BlockFetcher.Request r, boolean streamed) {
        return pending.remove(r);
    }

    /** The blocks of {@code r}, no longer pending (they go through Spark's path); null if none. */
    List<BlockOrigin> remove(BlockFetcher.Request r) {
        return pending.remove(r);
    }

    /** Every pending request's blocks of the node {@code peer}, no longer pending. */
    List<List<BlockOrigin>> removePeer(NodeAddress peer) {
        List<List<BlockOrigin>> out = new ArrayList<>();
        for (Iterator<Map.Entry<BlockFetcher.Request, List<BlockOrigin>>> it = pending.entrySet().iterator();
             it.hasNext(); ) {
            Map.Entry<BlockFetcher.Request, List<BlockOrigin>> e = it.next();
            if (e.getKey().peer().equals(peer)) {
                out.add(e.getValue());
                it.remove();
            }
        }
        return out;
    }

    /** Every pending request's blocks, no longer pending. */
    List<List<BlockOrigin>> removeAll() {
        List<List<BlockOrigin>> out = new ArrayList<>(pending.values());
        pending.clear();
        return out;
    }

    /**
     * The origin a failure names, else that of the oldest block still outstanding. A failure is a
     * result for a request not handed out yet, so {@code origins} still holds it (never empty here).
     */
    BlockOrigin blame(FetchFailure f) {
        List<BlockOrigin> os = f.request() == null ? null : pending.get(f.request());
        if (os == null) {
            BlockFetcher.Request o = oldest.get();
            os = o == null ? null : pending.get(o);
        }
        return (os != null ? os : pending.values().iterator().next()).get(0);
    }
}
