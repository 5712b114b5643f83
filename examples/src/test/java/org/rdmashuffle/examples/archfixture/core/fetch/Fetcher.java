package org.rdmashuffle.examples.archfixture.core.fetch;

import org.rdmashuffle.examples.archfixture.core.directory.Peers;

/** ArchitectureTest's fixture: a fetch room, using the directory (allowed). */
public final class Fetcher {
    public int fetch(Peers peers) {
        return peers.slotBytes();
    }
}
