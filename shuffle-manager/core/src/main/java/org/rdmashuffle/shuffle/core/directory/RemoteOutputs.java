package org.rdmashuffle.shuffle.core.directory;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;
import org.rdmashuffle.shuffle.core.format.ControlProtocol;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.Pauses;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;

/**
 * What this process's readers know of their peers' outputs: the output table descriptor of each peer's node
 * and shuffle (looked up once over the control protocol, then cached in {@link RemoteTables}) and the map
 * outputs' metadata READ per shuffle ({@link MetadataCache}, shared by the fetchers), and forgetting them
 * when a peer failed a fetch, was removed, or a shuffle was unregistered.
 *
 * <p>Threads: task threads look up and forget (several at once); fetchers' completion threads write the
 * metadata caches; the owner's maintenance thread asks {@link #addShufflesTo}. Thread-safe. Blames nobody:
 * a lookup that fails throws, and the reader decides whom to blame.
 */
public final class RemoteOutputs {
    private final RdmaNode node;
    private final PeerDirectory directory;
    private final long requestTimeoutMs;
    private final RemoteTables remoteTables = new RemoteTables();
    private final Map<Integer, MetadataCache> metadataCaches = new ConcurrentHashMap<>();
    /** Peers whose cached node address, table and metadata were dropped after a failed fetch from them. */
    private final LongAdder peersForgotten = new LongAdder();

    /**
     * @param node the node that looks tables up (the local serving node: readers READ through it too)
     * @param requestTimeoutMs the longest a table lookup waits for its reply
     */
    public RemoteOutputs(RdmaNode node, PeerDirectory directory, long requestTimeoutMs) {
        this.node = node;
        this.directory = directory;
        this.requestTimeoutMs = requestTimeoutMs;
    }

    /**
     * The output table descriptor of {@code shuffleId} at {@code peer}, asked once and cached; null when the
     * peer holds no table for it (it registered none of its outputs: the engine's path serves them). On the
     * task thread; blocks for at most the request timeout.
     */
    public RegionDescriptor table(String peerId, NodeAddress peer, long incarnation, int shuffleId)
            throws TransportException {
        RegionDescriptor d = remoteTables.get(peerId, peer, incarnation, shuffleId);
        if (d != null) {
            return d;
        }
        RdmaChannel ch = node.connect(peer);
        ByteBuffer reply;
        try {
            reply = Pauses.get(ch.call(ControlProtocol.lookupTable(shuffleId)), requestTimeoutMs);
        } catch (Exception e) {
            throw new TransportException("cannot look up shuffle " + shuffleId + "'s output table at " + peer, e);
        }
        d = ControlProtocol.parseTableReply(reply);
        if (d == null) {
            return null;
        }
        remoteTables.put(peerId, peer, incarnation, shuffleId, d);
        return d;
    }

    /** The metadata readers here have READ for {@code shuffleId}, shared by their fetchers. */
    public MetadataCache metadataCache(int shuffleId) {
        return metadataCaches.computeIfAbsent(shuffleId, id -> new MetadataCache());
    }

    /**
     * Forgets what is cached of {@code peerId}'s node for {@code shuffleId} after a failed fetch from it: its
     * address in the directory, its table descriptor and its outputs' metadata, so the next attempt (after
     * the engine reran the lost maps) looks everything up afresh.
     */
    public void forgetPeer(String peerId, NodeAddress peer, int shuffleId) {
        peersForgotten.increment();
        directory.invalidate(peerId);
        if (peer != null) {
            remoteTables.forget(peerId, peer, shuffleId);
            MetadataCache c = metadataCaches.get(shuffleId);
            if (c != null) {
                c.forget(peer);
            }
        }
    }

    /**
     * Learns the peers the engine removed since last asked (see {@link PeerDirectory#refreshRemoved()}) and
     * forgets what is cached of their nodes for every shuffle: table descriptors and metadata of nodes that
     * are gone.
     */
    public void refreshRemoved() {
        for (NodeAddress gone : directory.refreshRemoved()) {
            remoteTables.forgetNode(gone);
            for (MetadataCache c : metadataCaches.values()) {
                c.forget(gone);
            }
        }
    }

    /** Forgets everything cached of {@code shuffleId} (it was unregistered). */
    public void forgetShuffle(int shuffleId) {
        metadataCaches.remove(shuffleId);
        remoteTables.forgetShuffle(shuffleId);
    }

    /** Adds the shuffles anything is cached of (metadata, a peer's table) to {@code out}. */
    public void addShufflesTo(java.util.Collection<Integer> out) {
        out.addAll(metadataCaches.keySet());
        remoteTables.addShufflesTo(out);
    }

    public long peersForgotten() {
        return peersForgotten.sum();
    }
}
