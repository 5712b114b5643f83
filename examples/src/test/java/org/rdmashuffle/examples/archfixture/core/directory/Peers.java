package org.rdmashuffle.examples.archfixture.core.directory;

import org.rdmashuffle.examples.archfixture.core.format.Layout;

/** ArchitectureTest's fixture: a directory room, using the format (allowed). */
public final class Peers {
    public int slotBytes() {
        return Layout.SLOT_BYTES;
    }
}
