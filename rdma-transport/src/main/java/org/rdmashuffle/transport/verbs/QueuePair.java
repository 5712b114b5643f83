package org.rdmashuffle.transport.verbs;

import java.io.IOException;

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

    /** Disconnects and destroys the queue pair and its rdma_cm id, never throwing. Idempotent. */
    void closeQuietly();
}
