package org.rdmashuffle.transport.tcp;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * rkey → region: looked up by the responder thread without locks or allocation, written under this object's
 * monitor by the threads that register and deregister (map tasks, a NodeManager's dispatcher or its workers).
 *
 * <p>One open-addressed array of regions, probed linearly from the key's mixed hash; a slot holds a region
 * (whose own final {@code rkey} is the key), {@link #REMOVED} (a tombstone: probing goes on past it) or null
 * (probing stops). Writes change the array in place, one slot at a time, each slot written with release
 * semantics and read with acquire: a reader probing while a slot changes sees the slot before or after, and
 * either way finds every region that stays live, never one under another key. A removal leaves a tombstone
 * instead of moving later entries back (a move could carry a live region past a reader mid-probe).
 *
 * <p>When live regions and tombstones together fill half the slots, or live regions fall under a sixteenth
 * of them, the table is rebuilt into a fresh array sized for the live regions (between a quarter and an eighth
 * full) and published with a volatile write; a reader still probing the old array finds what it held when it
 * was replaced (a region removed since fails its own use count and is answered as unknown). Between two
 * rebuilds of an array of {@code c} slots at least {@code c / 16} puts or removes happen, so each costs O(1)
 * amortized, and an emptied table is back to {@link #MIN_CAPACITY} slots.
 */
final class RegionTable {
    static final int MIN_CAPACITY = 16;
    /** A removed entry: probes go on past it; puts may take its slot. */
    private static final TcpRegion REMOVED =
            new TcpRegion(null, 0, 0, java.nio.ByteBuffer.allocate(1), null, false, null);
    private static final VarHandle SLOT = MethodHandles.arrayElementVarHandle(TcpRegion[].class);

    /** The array readers probe; replaced (never shrunk in place) by a rebuild. */
    private volatile TcpRegion[] slots = new TcpRegion[MIN_CAPACITY];
    /** Live regions; written under the monitor. */
    private volatile int size;
    /** Slots that are not null (live regions and tombstones); under the monitor. */
    private int used;

    /** The live region with {@code rkey}, or null. Lock-free, allocation-free. */
    TcpRegion get(int rkey) {
        TcpRegion[] s = slots;
        int mask = s.length - 1;
        for (int i = mix(rkey) & mask; ; i = (i + 1) & mask) {
            TcpRegion r = (TcpRegion) SLOT.getAcquire(s, i);
            if (r == null) {
                return null;
            }
            if (r != REMOVED && r.rkey == rkey) {
                return r;
            }
        }
    }

    synchronized boolean contains(int rkey) {
        return get(rkey) != null;
    }

    /** Adds {@code region}, whose rkey no live region has (the node makes sure). */
    synchronized void put(TcpRegion region) {
        if (used + 1 > slots.length / 2) {
            rebuild(size + 1);
        }
        TcpRegion[] s = slots;
        int mask = s.length - 1;
        int i = mix(region.rkey) & mask;
        while (true) {
            TcpRegion r = s[i];
            if (r == null) {
                used++;
                break;
            }
            if (r == REMOVED) {
                break;
            }
            i = (i + 1) & mask;
        }
        SLOT.setRelease(s, i, region);
        size = size + 1;
    }

    /** Removes the region with {@code rkey}, if there is one. */
    synchronized void remove(int rkey) {
        TcpRegion[] s = slots;
        int mask = s.length - 1;
        for (int i = mix(rkey) & mask; ; i = (i + 1) & mask) {
            TcpRegion r = s[i];
            if (r == null) {
                return;
            }
            if (r != REMOVED && r.rkey == rkey) {
                SLOT.setRelease(s, i, REMOVED);
                size = size - 1;
                break;
            }
        }
        if (s.length > MIN_CAPACITY && size < s.length / 16) {
            rebuild(size);
        }
    }

    /** The live regions now. */
    synchronized TcpRegion[] all() {
        TcpRegion[] out = new TcpRegion[size];
        int n = 0;
        for (TcpRegion r : slots) {
            if (r != null && r != REMOVED) {
                out[n++] = r;
            }
        }
        return out;
    }

    int size() {
        return size;
    }

    /** Slots of the array readers probe now (tests). */
    int capacity() {
        return slots.length;
    }

    /**
     * Copies the live regions into a new array with room for {@code live} of them at between an eighth and a
     * quarter full (no tombstones), and publishes it.
     */
    private void rebuild(int live) {
        int capacity = MIN_CAPACITY;
        while (capacity < 4L * live) {
            capacity <<= 1;
        }
        TcpRegion[] fresh = new TcpRegion[capacity];
        int mask = capacity - 1;
        int n = 0;
        for (TcpRegion r : slots) {
            if (r != null && r != REMOVED) {
                int i = mix(r.rkey) & mask;
                while (fresh[i] != null) {
                    i = (i + 1) & mask;
                }
                fresh[i] = r;
                n++;
            }
        }
        used = n;
        slots = fresh; // volatile: readers that see the new array see every region copied into it
    }

    private static int mix(int k) {
        int h = k * 0x9E3779B9;
        return h ^ (h >>> 16);
    }
}
