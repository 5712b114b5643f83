package org.rdmashuffle.transport;

import java.nio.ByteBuffer;

/**
 * What a peer needs to READ a registered region: its address, length and remote key.
 *
 * @param address the region's first byte in the peer's address space (provider-defined for tcp)
 * @param length the region's length in bytes
 * @param rkey the remote key that grants READ access
 */
public record RegionDescriptor(long address, long length, int rkey) {
    /** Bytes {@link #writeTo(ByteBuffer)} writes. */
    public static final int ENCODED_BYTES = 20;

    public void writeTo(ByteBuffer b) {
        b.putLong(address).putLong(length).putInt(rkey);
    }

    public static RegionDescriptor readFrom(ByteBuffer b) {
        return new RegionDescriptor(b.getLong(), b.getLong(), b.getInt());
    }

    @Override
    public String toString() {
        return "Region[address=0x" + Long.toHexString(address) + ", length=" + length + ", rkey=0x"
                + Integer.toHexString(rkey) + "]";
    }
}
