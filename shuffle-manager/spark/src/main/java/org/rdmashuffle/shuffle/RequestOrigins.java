package org.rdmashuffle.shuffle;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.transport.NodeAddress;

/**
 * The Spark blocks behind each request a reduce task hands its {@link BlockFetcher}: those still to come out of
 * it, and the origin a failure concerns — also for a streamed block already handed out (even released), whose
 * window READs may be the oldest in flight when the fetcher times out. Task thread only.
 */
final class RequestOrigins {
    /** The blocks of each request the fetcher has not handed out yet, in partition order. */
    private final Map<BlockFetcher.Request, List<BlockOrigin>> pending = new HashMap<>();
    /** The blocks of streamed requests handed out: their windows are READ after, and may outlive the block. */
    private final Map<BlockFetcher.Request, List<BlockOrigin>> streamed = new HashMap<>();

    void add(BlockFetcher.Request r, List<BlockOrigin> blocks) {
        pending.put(r, blocks);
    }

    /**
     * The blocks of {@code r}, whose block the fetcher handed out now ({@code streamed}: READ window by window
     * while it is decoded); null when they went elsewhere since.
     */
    List<BlockOrigin> handedOut(BlockFetcher.Request r, boolean streamed) {
        List<BlockOrigin> os = pending.remove(r);
        if (streamed && os != null) {
            this.streamed.put(r, os);
        }
        return os;
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
     * The origin a failure concerns: the first block of the request it names — one still to come out of the
     * fetcher, or a streamed block handed out (a timeout may name its window) — never another request's; null
     * when the request is no longer this task's to READ (it went through Spark's path) or none is named.
     */
    BlockOrigin blame(FetchFailure f) {
        BlockFetcher.Request r = f.request();
        if (r == null) {
            return null;
        }
        List<BlockOrigin> os = pending.get(r);
        if (os == null) {
            os = streamed.get(r);
        }
        return os == null ? null : os.get(0);
    }
}
