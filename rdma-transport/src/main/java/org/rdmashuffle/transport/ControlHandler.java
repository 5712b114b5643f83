package org.rdmashuffle.transport;

import java.nio.ByteBuffer;

/**
 * Answers two-sided control messages (handshake extensions, directory queries). Runs on the node's
 * serving thread: keep it short and non-blocking.
 */
@FunctionalInterface
public interface ControlHandler {
    /**
     * @param request the message (a read-only view valid only during the call)
     * @return the reply, or {@code null} for an empty one
     * @throws Exception to send the caller {@link ReadStatus#HANDLER_FAILED}
     */
    ByteBuffer onMessage(ByteBuffer request) throws Exception;

    /** Replies to nothing: every message fails. */
    ControlHandler NONE = request -> {
        throw new IllegalStateException("this node answers no control messages");
    };
}
