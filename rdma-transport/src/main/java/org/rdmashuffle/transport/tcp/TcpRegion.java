package org.rdmashuffle.transport.tcp;

import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicInteger;
import org.rdmashuffle.transport.Mappings;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.Realms;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * A registration of the tcp provider. The responder serves READs from it through views it borrows
 * one per pending reply ({@link #borrowServeView}) or by absolute copies ({@link #copyTo}), so no
 * position or limit is ever shared between two replies; READs land through {@link #sinkView}
 * (requester thread only). A use count keeps memory the region mapped itself alive until the last
 * READ being served from it has been sent.
 */
final class TcpRegion implements MemoryRegion {
    final TcpNode node;
    final int rkey;
    final long base;
    final int length;
    final RegionAccess access;
    /**
     * The realm whose connections may READ it on a node with secrets per realm (there, no other
     * connection may); null for none.
     */
    final String realm;
    final ByteBuffer sinkView;
    /** Spare serving views, reused so that serving allocates nothing; responder thread only. */
    private ByteBuffer[] spareViews;
    private int spareViewCount;
    private final ByteBuffer memory;
    private final boolean ownsMapping;
    private final RegionDescriptor descriptor;
    private static final int MAX_SPARE_VIEWS = 64;
    private final AtomicInteger uses = new AtomicInteger(1);
    private volatile boolean open = true;

    TcpRegion(TcpNode node, int rkey, long base, ByteBuffer memory, RegionAccess access, boolean ownsMapping,
              String realm) {
        this.node = node;
        this.realm = realm;
        this.rkey = rkey;
        this.base = base;
        this.memory = memory;
        this.length = memory.capacity();
        this.access = access;
        this.ownsMapping = ownsMapping;
        this.sinkView = access == RegionAccess.READ_SINK ? memory.duplicate().clear() : null;
        this.descriptor = new RegionDescriptor(base, length, rkey);
    }

    /**
     * A view of {@code [offset, offset + length)} owned by one pending reply until it is handed back
     * with {@link #returnServeView}. Responder thread only; the caller holds a use.
     */
    ByteBuffer borrowServeView(int offset, int length) {
        ByteBuffer v;
        if (spareViewCount > 0) {
            v = spareViews[--spareViewCount];
            spareViews[spareViewCount] = null;
        } else {
            if (spareViews == null) {
                spareViews = new ByteBuffer[MAX_SPARE_VIEWS]; // once, so that handing views back never allocates
            }
            v = memory.duplicate();
        }
        v.clear().position(offset).limit(offset + length);
        return v;
    }

    /** Takes back a view from {@link #borrowServeView}; responder thread only. */
    void returnServeView(ByteBuffer v) {
        if (spareViewCount < MAX_SPARE_VIEWS) {
            spareViews[spareViewCount++] = v;
        }
    }

    /** Copies {@code length} bytes from {@code offset} to {@code dst}'s position (absolute read: no shared state). */
    void copyTo(ByteBuffer dst, int offset, int length) {
        int at = dst.position();
        dst.put(at, memory, offset, length);
        dst.position(at + length);
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
        return "TcpRegion[" + descriptor + ", " + access + (realm == null ? "" : ", realm " + Realms.printable(realm))
                + "]";
    }
}
