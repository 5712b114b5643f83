package org.rdmashuffle.shuffle.core.directory;

import java.util.List;
import org.rdmashuffle.transport.NodeAddress;

/**
 * The directory a serving node registers with and readers look their peers' nodes up in. Peers are named
 * by the engine's id for the process that serves them (an executor id on Spark; a MapReduce adapter names
 * its NodeManagers' auxiliary services). On Spark it is the driver's directory over Spark's RPC
 * ({@code NodeDirectory.Client}).
 *
 * <p>Implementations are thread-safe: task threads and the owner's maintenance thread call in at once.
 * Calls that ask a remote directory may block (each bounded by the implementation's own timeout).
 */
public interface PeerDirectory {
    /**
     * What the directory knows of a peer's node: its address (or none) and incarnation, and whether the
     * engine removed the peer.
     */
    record Found(NodeAddress address, boolean removed, long incarnation) {
        /** The directory knows no node of that peer. */
        public static final Found NONE = new Found(null, false, 0);
        /** The engine removed that peer. */
        public static final Found GONE = new Found(null, true, 0);

        /** Whether this names the very node {@code peer} of {@code incarnation} (not one started since). */
        public boolean names(NodeAddress peer, long incarnation) {
            return address != null && address.equals(peer) && this.incarnation == incarnation;
        }
    }

    /**
     * Announces {@code peerId}'s node: its address and incarnation (random, new for every node the peer
     * starts — a node started again after one failed may have the same address).
     */
    void register(String peerId, NodeAddress address, long incarnation);

    /** What the directory knows of {@code peerId}'s node (cached once found). */
    Found find(String peerId);

    /**
     * What the directory knows of {@code peerId}'s node now, asked afresh (the cached node is dropped): a
     * reader asks before blaming a peer whose node it could not reach.
     *
     * @return the answer, or null when the directory could not be asked
     */
    Found recheck(String peerId);

    /** Whether this client has heard that the engine removed {@code peerId} (see {@link #refreshRemoved()}). */
    boolean knownRemoved(String peerId);

    /** Whether the engine removed {@code peerId}, asked now (its cached node is dropped); false when unknown. */
    boolean removed(String peerId);

    /**
     * Learns the peers the engine removed since last asked (rate-limited by the implementation).
     *
     * @return the cached nodes of peers learnt removed now, for the caller to forget what it holds of them
     */
    List<NodeAddress> refreshRemoved();

    /** Drops a cached entry (after a fetch failure: the peer may have restarted elsewhere). */
    void invalidate(String peerId);

    /**
     * Withdraws {@code peerId}'s node (readers then take its blocks through the engine's own path).
     *
     * @throws Exception when the directory could not be told
     */
    void forget(String peerId) throws Exception;

    /**
     * The shuffles among {@code held} (sorted) that the engine no longer knows.
     *
     * @throws Exception when the directory cannot be asked
     */
    int[] goneShuffles(int[] held) throws Exception;
}
