package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;

/**
 * What a {@link VerbsNode} needs of rdma-core, behind the API that reaches it: DiSNI and its libdisni
 * ({@link DisniDevice}, Java 17+), or libibverbs and librdmacm called through {@code java.lang.foreign}
 * ({@code FfmDevice}, Java 22+, in the jar's {@code META-INF/versions/22}). One rdma_cm listener, a default
 * protection domain (client queue pairs, READ sinks, and every registration of a node without realms), a
 * protection domain per realm a node serves ({@link #openDomain}: that realm's regions and the queue pairs
 * accepted for it), and one completion queue for every queue pair of the node, whose completions go to
 * {@link VerbsChannel#onCompletion} on the device's completion thread.
 *
 * <p>Everything else — the control connection, admission, the READ window, failure diagnosis and
 * repost, timeouts, accounting — is the node's and the channel's, the same for both APIs.
 */
interface VerbsDevice {
    /** ibv_access_flags, as in verbs.h. */
    int ACCESS_LOCAL_WRITE = 1;
    int ACCESS_REMOTE_WRITE = 2;
    int ACCESS_REMOTE_READ = 4;

    /** The RDMA device's name (e.g. siw0), for log lines. */
    String name();

    /** Which API reaches rdma-core, for log lines. */
    String api();

    /** What the queue pairs' initiator_depth and responder_resources are set to, and by what, for log lines. */
    String depths();

    /** The address the rdma_cm listener is bound to; client queue pairs connect from it. */
    InetAddress address();

    /** The rdma_cm listener's port. */
    int port();

    /** Registers {@code memory} (position 0 to capacity) with the default protection domain. */
    default Memory register(ByteBuffer memory, int access) throws IOException {
        return register(null, memory, access);
    }

    /**
     * Registers {@code memory} (position 0 to capacity) with {@code domain} ({@code null}: the default one).
     *
     * @throws IOException naming what to check (locked-memory limit, the device's max_mr_size)
     */
    Memory register(Domain domain, ByteBuffer memory, int access) throws IOException;

    /**
     * A new protection domain (ibv_alloc_pd) for one realm: its regions are registered in it, and the queue
     * pairs accepted for the realm are created in it (the device asks the admission's
     * {@link AcceptedQueuePairs.Entry#domain()}), so that a READ through them reaches only its regions (a
     * NIC answers an rkey of another domain with a remote access error). Deallocated by
     * {@link Domain#deallocate()} once its regions and queue pairs are gone.
     *
     * @throws IOException when the device cannot allocate one, or this API cannot bind a queue pair to one
     */
    Domain openDomain() throws IOException;

    /**
     * A connected client queue pair to the rdma_cm listener at {@code target}, within {@code timeoutMs},
     * its connect request carrying {@code privateData} (null: none) when {@link #carriesProof}.
     *
     * @throws IOException naming why (the rdma_cm event, or the timeout)
     */
    QueuePair connect(InetSocketAddress target, long timeoutMs, byte[] privateData) throws IOException;

    /**
     * Whether this API carries rdma_cm private data both ways: sends it with a connect request and hands
     * the listener what a peer's request carried ({@link VerbsNode#admitQueuePair}), so that a queue pair
     * can be bound to a proof of the application's secret. {@code java.lang.foreign}: yes; DiSNI 2.1: no
     * (libdisni drops private data on the accepting side).
     */
    boolean carriesProof();

    /**
     * Runs {@code r} once every work completion in the completion queue when this is called has been
     * polled (or at once where the API cannot tell: DiSNI polls on its own thread). What a destroyed queue
     * pair flushed into the queue before it went is then out of it, so its room can be reused without
     * overrunning the queue. {@code r} must not block; it may run on the completion thread.
     */
    default void afterCompletionsPolled(Runnable r) {
        r.run();
    }

    /**
     * Records the node's own failure when the device's ports are down ({@link LocalPorts}); called on the
     * node's timer, so that READs that time out without a completion are not blamed on the peer either.
     */
    default void checkPorts() {
    }

    /** Stops accepting and closes every accepted queue pair (peers can no longer READ). */
    void closeListener();

    /** Releases the rest: threads, completion queue, protection domain. Regions are closed before. */
    void close();

    /** A protection domain of one realm ({@link #openDomain}). */
    interface Domain {
        /** ibv_dealloc_pd; fails (and keeps it) while a region or queue pair is still in it. */
        void deallocate() throws IOException;
    }

    /** A registration: what work requests and peers name it by. */
    interface Memory {
        long address();

        int lkey();

        int rkey();

        /** Deregisters; the rkey fails from then on. */
        void deregister() throws Exception;
    }
}
