package org.rdmashuffle.examples.archfixture.core.format;

/** ArchitectureTest's fixture: a format room. */
public final class Layout {
    public static final int SLOT_BYTES = 32;

    private Layout() {
    }
}
