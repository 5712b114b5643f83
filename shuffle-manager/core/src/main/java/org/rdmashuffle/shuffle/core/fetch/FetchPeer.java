package org.rdmashuffle.shuffle.core.fetch;

import java.util.ArrayDeque;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.TransportException;

/**
 * One peer of a {@link BlockFetcher}: its channel, connected once per fetcher (or why that failed, which
 * then fails every request to it), the READs posted to it and the steps waiting for room. Task thread only.
 */
final class FetchPeer {
    /** Steps waiting to be posted, in order; a step waiting holds no buffer. */
    final ArrayDeque<FetchStep> waiting = new ArrayDeque<>();
    RdmaChannel channel;
    TransportException connectFailure;
    /** READs posted to this peer and not yet taken up by the task ({@link FetchBudget}). */
    int readsInFlight;
}
