package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.concurrent.CompletableFuture;

/**
 * One RC queue pair and its rdma_cm id, as a {@link VerbsChannel} and its node see it, whichever API
 * ({@link VerbsDevice}) made it. Client queue pairs belong to a channel, which gets their completions and
 * disconnects; accepted ones only let a peer READ this node's regions.
 */
interface QueuePair {
    /** The channel this queue pair belongs to; null for an accepted one and once its channel let go of it. */
    VerbsChannel channel();

    void channel(VerbsChannel c);

    /**
     * Posts the first {@code k} READs of {@code chain} as one list of signalled work requests. Called
     * with the channel's lock held, so never concurrently; allocates nothing once a chain of {@code k}
     * has been posted on this queue pair.
     *
     * @throws IOException when the device refused the list; nothing of it is then known to be posted
     */
    void post(ReadChain chain, int k) throws IOException;

    /**
     * Disconnects and destroys the queue pair and its rdma_cm id, never throwing. Idempotent: the first
     * caller destroys it; a later caller (another thread) waits until that is done, up to a bound
     * ({@link #CLOSE_WAIT_MS}), and returns then even when it is not. Either way, only
     * {@link #destroyed()} says when the queue pair can no longer write into memory.
     */
    void closeQuietly();

    /**
     * Completes once the queue pair is destroyed: from then on no READ posted on it lands anywhere, and it
     * makes no further work completion (those it made may still wait in the completion queue). Never
     * completes exceptionally; never completes when destroying it failed or was given up (a buffer a READ
     * of it may still write into must then never go back to its pool).
     */
    CompletableFuture<Void> destroyed();

    /**
     * This queue pair's own rdma_cm address (its source address and port, as the accepting node sees it as
     * the connect request's source), or null where unknown; a client's keep-alives name it.
     */
    InetSocketAddress localAddress();

    /** How long a second {@link #closeQuietly} caller waits for the first one's destroy. */
    long CLOSE_WAIT_MS = 10_000;
}
