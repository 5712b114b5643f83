package org.rdmashuffle.transport.verbs;

import java.util.Arrays;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The queue pairs of one {@code java.lang.foreign} device: every one by its rdma_cm id (the control path),
 * client ones by qp_num (read by the completion thread with no lock, no boxing), and the accepted ones
 * whose connection is established.
 */
final class FfmQueuePairs {
    /** Queue pairs by rdma_cm id address (control path only). */
    private final Map<Long, FfmQueuePair> byId = new ConcurrentHashMap<>();
    /** Client queue pairs by qp_num. */
    private final QpTable byQpNum = new QpTable();
    private final Set<FfmQueuePair> accepted = ConcurrentHashMap.newKeySet();

    void add(long id, FfmQueuePair qp) {
        byId.put(id, qp);
    }

    FfmQueuePair byId(long id) {
        return byId.get(id);
    }

    /** The client queue pair whose number is {@code qpNum} now, or null; on the completion thread. */
    FfmQueuePair byQpNum(int qpNum) {
        return byQpNum.get(qpNum);
    }

    /** A client queue pair now has a qp_num: its completions reach it from now on. */
    void completionsFor(int qpNum, FfmQueuePair qp) {
        byQpNum.put(qpNum, qp);
    }

    /** Forgets a destroyed queue pair. */
    void forget(FfmQueuePair qp, long id, int qpNum) {
        if (id != 0) {
            byId.remove(id, qp);
        }
        if (qpNum >= 0 && !qp.serverSide()) {
            byQpNum.remove(qpNum, qp);
        }
        accepted.remove(qp);
    }

    /** Accepted queue pairs whose connection is not established yet (each is aborted after connectTimeout). */
    int pendingAccepts() {
        int n = 0;
        for (FfmQueuePair qp : byId.values()) {
            if (qp.serverSide() && !accepted.contains(qp)) {
                n++;
            }
        }
        return n;
    }

    /** An accepted queue pair's connection is established. */
    void established(FfmQueuePair qp) {
        accepted.add(qp);
    }

    /** @return whether {@code qp} was an established accepted queue pair */
    boolean removeAccepted(FfmQueuePair qp) {
        return accepted.remove(qp);
    }

    /** The established accepted queue pairs, which are forgotten as such. */
    FfmQueuePair[] takeAccepted() {
        FfmQueuePair[] all = accepted.toArray(new FfmQueuePair[0]);
        accepted.clear();
        return all;
    }

    /** Every queue pair with an rdma_cm id now. */
    FfmQueuePair[] all() {
        return byId.values().toArray(new FfmQueuePair[0]);
    }

    /** int qp_num to queue pair, copy on write: the completion thread reads it with no lock and no boxing. */
    static final class QpTable {
        private record Snapshot(int[] keys, FfmQueuePair[] values) {
        }

        private volatile Snapshot snapshot = new Snapshot(new int[0], new FfmQueuePair[0]);

        FfmQueuePair get(int key) {
            Snapshot s = snapshot;
            int i = Arrays.binarySearch(s.keys, key);
            return i >= 0 ? s.values[i] : null;
        }

        synchronized void put(int key, FfmQueuePair v) {
            Snapshot s = snapshot;
            int i = Arrays.binarySearch(s.keys, key);
            if (i >= 0) {
                FfmQueuePair[] vs = s.values.clone();
                vs[i] = v;
                snapshot = new Snapshot(s.keys, vs);
                return;
            }
            int at = -i - 1;
            int n = s.keys.length;
            int[] ks = new int[n + 1];
            FfmQueuePair[] vs = new FfmQueuePair[n + 1];
            System.arraycopy(s.keys, 0, ks, 0, at);
            System.arraycopy(s.values, 0, vs, 0, at);
            ks[at] = key;
            vs[at] = v;
            System.arraycopy(s.keys, at, ks, at + 1, n - at);
            System.arraycopy(s.values, at, vs, at + 1, n - at);
            snapshot = new Snapshot(ks, vs);
        }

        synchronized void remove(int key, FfmQueuePair v) {
            Snapshot s = snapshot;
            int i = Arrays.binarySearch(s.keys, key);
            if (i < 0 || s.values[i] != v) {
                return;
            }
            int n = s.keys.length;
            int[] ks = new int[n - 1];
            FfmQueuePair[] vs = new FfmQueuePair[n - 1];
            System.arraycopy(s.keys, 0, ks, 0, i);
            System.arraycopy(s.values, 0, vs, 0, i);
            System.arraycopy(s.keys, i + 1, ks, i, n - i - 1);
            System.arraycopy(s.values, i + 1, vs, i, n - i - 1);
            snapshot = new Snapshot(ks, vs);
        }
    }
}
