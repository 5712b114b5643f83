package org.rdmashuffle.transport;

import org.rdmashuffle.pool.Registration;

/**
 * Memory registered with a node. Closing it deregisters it: its rkey fails from then on, and memory
 * the node mapped itself (a registered file) is unmapped once no READ is being served from it.
 * Closing is idempotent.
 */
public interface MemoryRegion extends Registration {
    RegionDescriptor descriptor();

    RegionAccess access();

    /** Length in bytes. */
    int length();

    /** Whether the region is still registered. */
    boolean isOpen();

    @Override
    void close();
}
