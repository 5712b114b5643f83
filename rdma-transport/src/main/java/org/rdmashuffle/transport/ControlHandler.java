package org.rdmashuffle.transport;

import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;

/**
 * Answers two-sided control messages (handshake extensions, directory queries). The node calls
 * {@link #onMessageAsync} on its serving thread: a handler that answers at once keeps it short and
 * non-blocking; one whose answer needs a disk or a lock returns a future and completes it elsewhere.
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
     * A message from a connection authenticated for {@code realm}. By default it answers as
     * {@link #onMessage(ByteBuffer)} does, whatever the realm.
     *
     * @param realm the realm the sending connection proved it holds the secret of, on a node with secrets
     *        per realm ({@link NodeOptions#secrets()}), on either provider; {@code null} on every other node
     * @param request the message (a read-only view valid only during the call)
     */
    default ByteBuffer onMessage(String realm, ByteBuffer request) throws Exception {
        return onMessage(request);
    }

    /**
     * The reply to a message from a connection authenticated for {@code realm}, now or later: the one the node
     * calls, on its serving thread. By default the future is completed at once with what
     * {@link #onMessage(String, ByteBuffer)} returns (or with what it throws), so a handler that overrides only
     * that one answers synchronously, as before.
     *
     * <p>A handler whose answer takes a disk, a lock or another thread overrides this one, hands the work to its
     * own threads and returns an incomplete future. Until it completes, the connection that sent the message waits
     * for its reply: none of its later requests is read (replies stay in request order, and a peer that keeps
     * sending while it waits is held back by its socket's buffers, not queued), while every other connection of the
     * node is served as usual. Completing the future, on any thread, only hands the reply to the serving thread.
     * Completing it exceptionally sends {@link ReadStatus#HANDLER_FAILED}, as does a reply longer than
     * {@code spark.shuffle.rdma.maxControlMessageSize}. If the connection or the node closes first, the reply is
     * dropped when it comes.
     *
     * @param realm as for {@link #onMessage(String, ByteBuffer)}
     * @param request the message (a read-only view, valid until the returned future completes)
     * @return the reply's future: completed with the reply, or {@code null} for an empty one; never null itself
     */
    default CompletableFuture<ByteBuffer> onMessageAsync(String realm, ByteBuffer request) {
        try {
            return CompletableFuture.completedFuture(onMessage(realm, request));
        } catch (Throwable e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    /** Replies to nothing: every message fails. */
    ControlHandler NONE = request -> {
        throw new IllegalStateException("this node answers no control messages");
    };
}
