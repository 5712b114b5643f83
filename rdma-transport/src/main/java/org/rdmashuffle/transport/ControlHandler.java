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

    /**
     * A message from a connection authenticated for {@code realm}. The node calls this one; by default it
     * answers as {@link #onMessage(ByteBuffer)} does, whatever the realm.
     *
     * @param realm the realm the sending connection proved it holds the secret of, on a node with secrets
     *        per realm ({@link NodeOptions#secrets()}); {@code null} on every other node (and on the verbs
     *        provider)
     * @param request the message (a read-only view valid only during the call)
     */
    default ByteBuffer onMessage(String realm, ByteBuffer request) throws Exception {
        return onMessage(request);
    }

    /** Replies to nothing: every message fails. */
    ControlHandler NONE = request -> {
        throw new IllegalStateException("this node answers no control messages");
    };
}
