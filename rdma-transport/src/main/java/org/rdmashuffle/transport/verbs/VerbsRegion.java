package org.rdmashuffle.transport.verbs;

import java.nio.ByteBuffer;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.Mappings;

/**
 * A memory region registered with the device. Its descriptor publishes the region's virtual address
 * and its rkey (never the lkey, which only local work requests use). Closing deregisters it; memory
 * the node mapped itself is unmapped after the device has let go of it. When the deregistration fails,
 * nothing is unmapped or let go: the region is kept for good and its node fails
 * ({@link VerbsNode#deregistrationFailed}).
 */
final class VerbsRegion implements MemoryRegion {
    final VerbsNode node;
    final long address;
    final int length;
    final int lkey;
    final int rkey;
    private final VerbsDevice.Memory mr;
    private final ByteBuffer memory;
    private final boolean ownsMapping;
    private final RegionAccess access;
    private final RegionDescriptor descriptor;
    /** The realm whose protection domain holds it (a node with realms), or null for the default domain. */
    final String realm;
    /** Lets go of the realm's domain once deregistered, or null. */
    private final Runnable releaseDomain;
    private volatile boolean open = true;

    VerbsRegion(VerbsNode node, VerbsDevice.Memory mr, ByteBuffer memory, RegionAccess access, boolean ownsMapping) {
        this(node, mr, memory, access, ownsMapping, null, null);
    }

    VerbsRegion(VerbsNode node, VerbsDevice.Memory mr, ByteBuffer memory, RegionAccess access, boolean ownsMapping,
                String realm, Runnable releaseDomain) {
        this.node = node;
        this.realm = realm;
        this.releaseDomain = releaseDomain;
        this.mr = mr;
        this.memory = memory;
        this.access = access;
        this.ownsMapping = ownsMapping;
        this.address = mr.address();
        this.length = memory.capacity();
        this.lkey = mr.lkey();
        this.rkey = mr.rkey();
        this.descriptor = new RegionDescriptor(address, length, rkey);
    }

    @Override
    public RegionDescriptor descriptor() {
        return descriptor;
    }

    @Override
    public RegionAccess access() {
        return access;
    }

    @Override
    public int length() {
        return length;
    }

    @Override
    public boolean isOpen() {
        return open;
    }

    /** What a READ of {@code len} bytes at {@code addr} under this region's rkey would get. */
    int check(long addr, int len) {
        if (!open) {
            return ReadStatus.UNKNOWN_KEY;
        }
        if (access != RegionAccess.REMOTE_READ) {
            return ReadStatus.ACCESS_DENIED;
        }
        if (len <= 0) {
            return ReadStatus.INVALID_LENGTH;
        }
        if (addr < address || addr - address > length - (long) len) {
            return ReadStatus.OUT_OF_BOUNDS;
        }
        return ReadStatus.SUCCESS;
    }

    /**
     * Deregisters the region, then leaves the node's table: a node closing meanwhile still finds it there, and its
     * close of it waits here (on this region's lock) until the deregistration returned, so the device is never
     * closed under a deregistration on another thread. Idempotent.
     */
    @Override
    public void close() {
        Exception failed = null;
        synchronized (this) {
            if (!open) {
                return;
            }
            open = false; // READs of it are refused from now on
            try {
                mr.deregister();
            } catch (Exception e) {
                failed = e;
            }
        }
        node.deregistered(this);
        if (failed != null) {
            // Still registered, maybe: the NIC could write into or serve this memory. It stays mapped and
            // reachable for good (KeptRegions), and the node fails.
            node.deregistrationFailed(this, failed);
            return;
        }
        if (releaseDomain != null) {
            releaseDomain.run(); // its realm's domain may go now (a failed deregistration keeps it, above)
        }
        if (ownsMapping) {
            Mappings.unmap(memory);
        }
    }

    @Override
    public String toString() {
        return "VerbsRegion[" + descriptor + ", " + access + "]";
    }
}
