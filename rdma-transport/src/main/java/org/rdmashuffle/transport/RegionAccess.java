package org.rdmashuffle.transport;

/** What a registration allows. */
public enum RegionAccess {
    /** Peers may READ it (served map outputs, output tables). */
    REMOTE_READ,
    /** Local READs may land in it (pooled receive buffers); peers may not read it. */
    READ_SINK
}
