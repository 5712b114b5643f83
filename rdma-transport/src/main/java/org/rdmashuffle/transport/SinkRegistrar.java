package org.rdmashuffle.transport;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.function.BooleanSupplier;
import org.rdmashuffle.pool.Registrar;
import org.rdmashuffle.pool.Registration;

/**
 * What {@link RdmaNode#sinkRegistrar()} returns, for every provider: registers a pool's chunks with the
 * node as READ sinks ({@link RegionAccess#READ_SINK}). Once the node is closed it throws
 * {@link IllegalStateException} rather than an {@link IOException}: the host is not refusing memory (which
 * the pool would take for a cap), the node is gone.
 */
public final class SinkRegistrar implements Registrar {
    private final RdmaNode node;
    private final BooleanSupplier closed;

    /** Registers with {@code node}, whose {@code closed} says whether it is closed. */
    public SinkRegistrar(RdmaNode node, BooleanSupplier closed) {
        this.node = node;
        this.closed = closed;
    }

    @Override
    public Registration register(ByteBuffer memory) throws IOException {
        if (closed.getAsBoolean()) {
            throw new IllegalStateException("node " + node.localAddress() + " is closed");
        }
        return node.register(memory, RegionAccess.READ_SINK);
    }
}
