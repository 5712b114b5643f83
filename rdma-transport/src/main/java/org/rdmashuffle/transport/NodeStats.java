package org.rdmashuffle.transport;

/**
 * Counters of one node since it started.
 *
 * @param readsCompleted READs this node posted that completed successfully
 * @param readsFailed READs this node posted that completed with an error
 * @param bytesRead payload bytes that arrived for this node's READs
 * @param readsServed READs this node served to peers
 * @param readsRefused READs from peers answered with an error
 * @param bytesServed payload bytes this node sent to peers
 * @param registeredRegions regions registered now
 * @param registeredBytes bytes those regions cover
 * @param openChannels channels this node opened that are open now
 * @param readsPosted READs this node posted (completed, failed or still in flight)
 * @param channelsOpened channels this node opened to peers since it started
 * @param reconnects connections opened again to a peer this node had been connected to before (a
 *     channel that failed or went idle, or a queue pair replaced after an error)
 * @param connectionsRefused connections from peers this node refused (past a limit, failed handshake or
 *     authentication, queue pairs no authenticated peer announced)
 * @param regionsLeaked regions of this process whose deregistration failed: their memory is kept (mapped,
 *     reachable) for good, since the device may still write into it or serve it, and the node that held
 *     each has failed (verbs only; counted for the process, so a node started after a failed one shows them)
 * @param connectionsEvictedIdle tcp: handshaken connections closed, at {@code maxConnections}, because they had been
 *     silent longest (a second at least) when a new connection came (verbs: its tcp control node's)
 */
public record NodeStats(long readsCompleted, long readsFailed, long bytesRead, long readsServed, long readsRefused,
                        long bytesServed, int registeredRegions, long registeredBytes, int openChannels,
                        long readsPosted, long channelsOpened, long reconnects, long connectionsRefused,
                        long regionsLeaked, long connectionsEvictedIdle)
        implements java.io.Serializable {
    private static final long serialVersionUID = 1L;

    /** Counters of a node that neither leaks a region nor evicts idle connections. */
    public NodeStats(long readsCompleted, long readsFailed, long bytesRead, long readsServed, long readsRefused,
                     long bytesServed, int registeredRegions, long registeredBytes, int openChannels,
                     long readsPosted, long channelsOpened, long reconnects, long connectionsRefused) {
        this(readsCompleted, readsFailed, bytesRead, readsServed, readsRefused, bytesServed, registeredRegions,
                registeredBytes, openChannels, readsPosted, channelsOpened, reconnects, connectionsRefused, 0, 0);
    }
}
