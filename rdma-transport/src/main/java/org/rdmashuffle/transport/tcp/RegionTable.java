package org.rdmashuffle.transport.tcp;

import java.util.Arrays;

/**
 * rkey → region, read without locks or allocation by the responder thread; written (rarely) under
 * a lock by copying the table (copy on write, open addressing).
 */
final class RegionTable {
    private static final class Snapshot {
        final int[] keys;
        final TcpRegion[] regions;
        final int size;

        Snapshot(int capacity, int size) {
            this.keys = new int[capacity];
            this.regions = new TcpRegion[capacity];
            this.size = size;
        }
    }

    private volatile Snapshot snapshot = new Snapshot(16, 0);

    /** The live region with {@code rkey}, or null. */
    TcpRegion get(int rkey) {
        Snapshot s = snapshot;
        int mask = s.keys.length - 1;
        for (int i = mix(rkey) & mask; ; i = (i + 1) & mask) {
            TcpRegion r = s.regions[i];
            if (r == null) {
                return null;
            }
            if (s.keys[i] == rkey) {
                return r;
            }
        }
    }

    synchronized boolean contains(int rkey) {
        return get(rkey) != null;
    }

    synchronized void put(TcpRegion region) {
        Snapshot old = snapshot;
        int n = old.size + 1;
        int cap = old.keys.length;
        while (n * 2 > cap) {
            cap *= 2;
        }
        Snapshot s = new Snapshot(cap, n);
        copyInto(old, s, -1);
        insert(s, region);
        snapshot = s;
    }

    synchronized void remove(int rkey) {
        Snapshot old = snapshot;
        if (get(rkey) == null) {
            return;
        }
        Snapshot s = new Snapshot(old.keys.length, old.size - 1);
        copyInto(old, s, rkey);
        snapshot = s;
    }

    synchronized TcpRegion[] all() {
        Snapshot s = snapshot;
        return Arrays.stream(s.regions).filter(r -> r != null).toArray(TcpRegion[]::new);
    }

    int size() {
        return snapshot.size;
    }

    /** Slots of the table readers probe now (tests). */
    int capacity() {
        return snapshot.keys.length;
    }

    private static void copyInto(Snapshot from, Snapshot to, int skipKey) {
        for (int i = 0; i < from.regions.length; i++) {
            TcpRegion r = from.regions[i];
            if (r != null && !(from.keys[i] == skipKey)) {
                insert(to, r);
            }
        }
    }

    private static void insert(Snapshot s, TcpRegion r) {
        int mask = s.keys.length - 1;
        int i = mix(r.rkey) & mask;
        while (s.regions[i] != null) {
            i = (i + 1) & mask;
        }
        s.keys[i] = r.rkey;
        s.regions[i] = r;
    }

    private static int mix(int k) {
        int h = k * 0x9E3779B9;
        return h ^ (h >>> 16);
    }
}
