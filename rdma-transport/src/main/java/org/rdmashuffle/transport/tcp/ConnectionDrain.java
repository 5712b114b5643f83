package org.rdmashuffle.transport.tcp;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import org.rdmashuffle.transport.Mappings;

/**
 * Draining: what a connection does after its error reply has been written. Its output is shut down (so
 * the reply is not lost to a reset while the peer still sends) and its buffers go back; its input is read
 * into one buffer shared by every draining connection (nobody looks at it) and dropped until the peer
 * closes. It holds no handshake slot, and at most {@link TcpResponder.Limits#maxDraining()} connections
 * drain at once: past that the one draining longest is reset. Responder thread only.
 */
final class ConnectionDrain {
    private final TcpResponder responder;
    /** Where draining connections' input goes: read and dropped, shared because nobody looks at it. */
    private final ByteBuffer drainBuffer = ByteBuffer.allocateDirect(TcpResponder.READ_BUDGET_BYTES);
    private boolean released;

    ConnectionDrain(TcpResponder responder) {
        this.responder = responder;
    }

    /** {@code c} wrote its error reply: from now on it drains. */
    void start(ServedConnection c) throws IOException {
        ConnectionAdmission admission = responder.admission;
        if (c.inHandshake) {
            admission.leaveHandshake(c);
        }
        admission.unlink(c);
        c.state = ServedConnection.State.DRAINING;
        c.control = null;
        c.drainSinceNanos = System.nanoTime();
        c.drainedBytes = 0;
        admission.draining++;
        c.releaseBuffers();
        c.interest(SelectionKey.OP_READ);
        c.ch.shutdownOutput();
        if (admission.draining > responder.limits.maxDraining()) {
            admission.evictOldestDraining(null);
        }
    }

    /**
     * Discards {@code c}'s input until the peer closes its side, within this turn's read budget; resets the
     * connection once it has drained for {@code connectTimeout} or sent more than an honest peer could
     * have had in flight ({@link TcpResponder.Limits#maxDrainBytes()}), checked at every read.
     */
    void drain(ServedConnection c) throws IOException {
        for (;;) {
            String why = null;
            if (System.nanoTime() - c.drainSinceNanos > responder.handshakeTimeoutNanos) {
                why = responder.limits.keys().drainLate;
            } else if (c.drainedBytes > responder.limits.maxDrainBytes()) {
                why = "peer sent more than " + responder.limits.maxDrainBytes() + " bytes after an error reply";
            }
            if (why != null) {
                responder.connectionsClosedByLimit++;
                responder.limitLog.warn("closing connection from {}: {}", c.remote, why);
                c.abort();
                return;
            }
            if (c.readThisTurn >= TcpResponder.READ_BUDGET_BYTES) {
                c.carryOver();
                return;
            }
            drainBuffer.clear();
            int n = c.ch.read(drainBuffer);
            if (n < 0) {
                c.close();
                return;
            }
            if (n == 0) {
                return;
            }
            c.readThisTurn += n;
            c.drainedBytes += n;
        }
    }

    /** The shared buffer's direct memory goes back; once, however often called. */
    void release() {
        if (!released) {
            released = true;
            Mappings.unmap(drainBuffer);
        }
    }
}
