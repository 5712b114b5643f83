package org.rdmashuffle.transport.tcp;

import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicInteger;
import org.rdmashuffle.transport.Mappings;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * A registration of the tcp provider. Served bytes come from {@link #serveView} (responder thread
 * only); READs land through {@link #sinkView} (requester thread only). A use count keeps memory the
 * region mapped itself alive until the last READ being served from it has been sent.
 */
final class TcpRegion implements MemoryRegion {
    final TcpNode node;
    final int rkey;
    final long base;
    final int length;
    final RegionAccess access;
    final ByteBuffer serveView;
    final ByteBuffer sinkView;
    private final ByteBuffer memory;
    private final boolean ownsMapping;
    private final RegionDescriptor descriptor;
    private final AtomicInteger uses = new AtomicInteger(1);
    private volatile boolean open = true;

    TcpRegion(TcpNode node, int rkey, long base, ByteBuffer memory, RegionAccess access, boolean ownsMapping) {
        this.node = node;
        this.rkey = rkey;
        this.base = base;
        this.memory = memory;
        this.length = memory.capacity();
        this.access = access;
        this.ownsMapping = ownsMapping;
        this.serveView = memory.duplicate().clear();
        this.sinkView = access == RegionAccess.READ_SINK ? memory.duplicate().clear() : null;
        this.descriptor = new RegionDescriptor(base, length, rkey);
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

    /** Takes a use for serving; false when the region is being deregistered. */
    boolean tryUse() {
        for (;;) {
            int u = uses.get();
            if (u <= 0) {
                return false;
            }
            if (uses.compareAndSet(u, u + 1)) {
                return true;
            }
        }
    }

    void unuse() {
        if (uses.decrementAndGet() == 0 && ownsMapping) {
            Mappings.unmap(memory);
        }
    }

    @Override
    public void close() {
        if (!open) {
            return;
        }
        synchronized (this) {
            if (!open) {
                return;
            }
            open = false;
        }
        node.deregistered(this);
        unuse();
    }

    @Override
    public String toString() {
        return "TcpRegion[" + descriptor + ", " + access + "]";
    }
}
