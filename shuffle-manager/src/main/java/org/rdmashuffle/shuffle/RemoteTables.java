package org.rdmashuffle.shuffle;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The output table descriptors this executor's reducers looked up at peers, one per serving executor, its
 * node and shuffle. Keyed by the executor too, not by the node's address alone: an executor replaced by
 * another on the same host and fixed port has another table, and its predecessor's descriptor must not
 * answer for it.
 *
 * <p>Thread-safe: every reduce task of the executor shares it.
 */
final class RemoteTables {
    private record Key(String executorId, NodeAddress node, int shuffleId) {
    }

    private final Map<Key, RegionDescriptor> tables = new ConcurrentHashMap<>();

    /** The cached descriptor, or null. */
    RegionDescriptor get(String executorId, NodeAddress node, int shuffleId) {
        return tables.get(new Key(executorId, node, shuffleId));
    }

    void put(String executorId, NodeAddress node, int shuffleId, RegionDescriptor table) {
        tables.put(new Key(executorId, node, shuffleId), table);
    }

    /** Forgets one entry (after a failed fetch from that executor). */
    void forget(String executorId, NodeAddress node, int shuffleId) {
        tables.remove(new Key(executorId, node, shuffleId));
    }

    /** Forgets every entry of a node that is gone. */
    void forgetNode(NodeAddress node) {
        tables.keySet().removeIf(k -> k.node().equals(node));
    }

    /** Forgets every entry of a shuffle that was unregistered. */
    void forgetShuffle(int shuffleId) {
        tables.keySet().removeIf(k -> k.shuffleId() == shuffleId);
    }

    /** Adds the shuffles entries are held for to {@code out}. */
    void addShufflesTo(java.util.Collection<Integer> out) {
        for (Key k : tables.keySet()) {
            out.add(k.shuffleId());
        }
    }
}
