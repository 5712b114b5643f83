package org.rdmashuffle.transport;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import org.rdmashuffle.pool.Registrar;

/**
 * One endpoint of the transport: it listens for peers, connects to them (one cached channel per
 * peer), and registers memory that peers may READ or that local READs land in.
 *
 * <p>Thread-safe. {@link #close()} closes channels, stops serving and deregisters every region, in
 * reverse order of creation.
 */
public interface RdmaNode extends AutoCloseable {
    /** Where peers reach this node. */
    NodeAddress localAddress();

    /**
     * The open channel to {@code peer}, connecting first if there is none (with the configured
     * timeout and retries).
     *
     * @throws TransportException when no connection could be made; the message names the peer and why
     */
    RdmaChannel connect(NodeAddress peer) throws TransportException;

    /** Registers a direct buffer's memory (position 0 to capacity) for no realm; see {@link #register(ByteBuffer, RegionAccess, String)}. */
    default MemoryRegion register(ByteBuffer directBuffer, RegionAccess access) throws IOException {
        return register(directBuffer, access, null);
    }

    /**
     * Registers a direct buffer's memory (position 0 to capacity); the caller keeps the buffer alive.
     *
     * @param realm the realm whose connections may READ the region on a node with secrets per realm
     *        ({@link NodeOptions#secrets()}): there a READ from a connection of any other realm is answered
     *        exactly as one with an unknown rkey, and a region of realm {@code null} is READ by nobody. On
     *        every other node it changes nothing. {@code null} for none; otherwise
     *        valid as {@link Realms#requireValid} checks.
     */
    MemoryRegion register(ByteBuffer directBuffer, RegionAccess access, String realm) throws IOException;

    /** Maps and registers part of a file for no realm; see {@link #registerFile(Path, long, int, String)}. */
    default MemoryRegion registerFile(Path file, long offset, int length) throws IOException {
        return registerFile(file, offset, length, null);
    }

    /**
     * Maps {@code length} bytes of {@code file} from {@code offset} read-only and registers them for
     * remote READ by {@code realm}'s connections (as {@link #register(ByteBuffer, RegionAccess, String)}
     * says). The region owns the mapping.
     */
    MemoryRegion registerFile(Path file, long offset, int length, String realm) throws IOException;

    /**
     * As {@link #registerFile(Path, long, int, String)}, from a file the caller opened for reading: the bytes of
     * exactly that file, whatever its path names by now (a caller that checked what it opened serves what it
     * checked). The channel stays the caller's; the region's mapping outlives its closing. A device that needs a
     * writable mapping of a file gets a copy of these bytes in registered memory instead.
     *
     * @param name the file's name in messages
     */
    MemoryRegion registerFile(FileChannel file, String name, long offset, int length, String realm)
            throws IOException;

    /**
     * {@code realm}'s job stopped: on a node with secrets per realm, drops what peers of that realm hold here. The
     * verbs provider closes the queue pairs accepted for the realm (READs through them fail) and deallocates its
     * protection domain once its regions are closed too (by their owners); the tcp provider does nothing (its
     * connections of the realm stay until they close; a resolver that forgot the realm refuses new ones). Regions are not closed here, and a later connection or registration for the realm
     * (while the node's resolver still knows its secret) works as before. Nothing on a node without realms.
     *
     * @param realm valid as {@link Realms#requireValid} checks
     */
    default void closeRealm(String realm) {
    }

    /** A registrar for a {@link org.rdmashuffle.pool.BufferPool} whose buffers receive READs. */
    Registrar sinkRegistrar();

    NodeStats stats();

    /**
     * Why this node stopped working while open (a serving or completion loop that could not go on), or
     * null while it works. A failed node opens no new channels (a node whose serving side failed has
     * closed every connection peers had to it); close it.
     */
    default Throwable failure() {
        return null;
    }

    @Override
    void close();
}
