package org.rdmashuffle.shuffle.core.directory;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The output table descriptors this executor's reducers looked up at peers, one per serving executor, its
 * node (address and incarnation) and shuffle. Keyed by the executor and the node's incarnation too, not by
 * the node's address alone: an executor replaced by another on the same host and fixed port, or a node
 * started again after one failed, has another table, and its predecessor's descriptor must not answer for it.
 *
 * <p>Thread-safe: every reduce task of the executor shares it.
 */
public final class RemoteTables {
    private record Key(String executorId, NodeAddress node, long incarnation, int shuffleId) {
    }

    private final Map<Key, RegionDescriptor> tables = new ConcurrentHashMap<>();

    /** The cached descriptor, or null. */
    public RegionDescriptor get(String executorId, NodeAddress node, long incarnation, int shuffleId) {
        return tables.get(new Key(executorId, node, incarnation, shuffleId));
    }

    public void put(String executorId, NodeAddress node, long incarnation, int shuffleId, RegionDescriptor table) {
        tables.put(new Key(executorId, node, incarnation, shuffleId), table);
    }

    /** Forgets that executor's entries of a node and shuffle, every incarnation (after a failed fetch from it). */
    public void forget(String executorId, NodeAddress node, int shuffleId) {
        tables.keySet().removeIf(k -> k.shuffleId() == shuffleId && k.executorId().equals(executorId)
                && k.node().equals(node));
    }

    /** Forgets every entry of a node that is gone. */
    public void forgetNode(NodeAddress node) {
        tables.keySet().removeIf(k -> k.node().equals(node));
    }

    /** Forgets every entry of a shuffle that was unregistered. */
    public void forgetShuffle(int shuffleId) {
        tables.keySet().removeIf(k -> k.shuffleId() == shuffleId);
    }

    /** Adds the shuffles entries are held for to {@code out}. */
    public void addShufflesTo(java.util.Collection<Integer> out) {
        for (Key k : tables.keySet()) {
            out.add(k.shuffleId());
        }
    }
}
