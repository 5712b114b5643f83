package org.rdmashuffle.transport.verbs;

import java.util.ArrayList;
import java.util.List;
import org.rdmashuffle.transport.ReadListener;

/** READs to complete later with one status (off the hot path: failures only). */
final class Deliveries {
    final List<ReadListener> listeners = new ArrayList<>();
    final List<Long> ids = new ArrayList<>();

    void add(ReadListener l, long id) {
        listeners.add(l);
        ids.add(id);
    }

    int size() {
        return listeners.size();
    }
}
