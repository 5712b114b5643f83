package org.rdmashuffle.shuffle.core.directory;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.transport.NodeAddress;

/**
 * Map outputs' metadata headers and region descriptors (never their offsets) that reducers on one
 * executor have READ, per serving node, output table and
 * map index, with the map attempt it belongs to. An entry answers only for that attempt, so output a
 * rerun map task republished is read afresh; a failed fetch drops the peer's entries.
 *
 * <p>Thread-safe: fetchers on task threads and completion threads share it.
 */
public final class MetadataCache {
    private record Key(NodeAddress peer, int tableRkey, int mapIndex) {
    }

    private record Entry(long mapId, ShuffleOutputTable.Metadata metadata) {
    }

    private final Map<Key, Entry> entries = new ConcurrentHashMap<>();

    /** The cached metadata, or null when there is none for that attempt ({@code mapId < 0}: any attempt). */
    public ShuffleOutputTable.Metadata get(NodeAddress peer, int tableRkey, int mapIndex, long mapId) {
        Entry e = entries.get(new Key(peer, tableRkey, mapIndex));
        if (e == null || (mapId >= 0 && e.mapId() != mapId)) {
            return null;
        }
        return e.metadata();
    }

    public void put(NodeAddress peer, int tableRkey, int mapIndex, long mapId, ShuffleOutputTable.Metadata m) {
        entries.put(new Key(peer, tableRkey, mapIndex), new Entry(mapId, m));
    }

    /**
     * Drops the entry of that map output if it still holds {@code metadata} (an offsets window READ with
     * it did not make sense: the whole metadata is READ again).
     */
    public void forget(NodeAddress peer, int tableRkey, int mapIndex, ShuffleOutputTable.Metadata metadata) {
        entries.computeIfPresent(new Key(peer, tableRkey, mapIndex), (k, e) -> e.metadata() == metadata ? null : e);
    }

    /** Drops every entry of {@code peer} (after a failed fetch from it). */
    public void forget(NodeAddress peer) {
        entries.keySet().removeIf(k -> k.peer().equals(peer));
    }

    /**
     * Heap bytes the entries hold, roughly (keys, map ids, headers and region descriptors): a map
     * output's partition offsets are never kept, so this does not grow with the partition count.
     */
    public long heldBytes() {
        long sum = 0;
        for (Entry e : entries.values()) {
            sum += 64 + e.metadata().heldBytes();
        }
        return sum;
    }

    public int size() {
        return entries.size();
    }
}
