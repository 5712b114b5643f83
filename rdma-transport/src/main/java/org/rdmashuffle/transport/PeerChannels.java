package org.rdmashuffle.transport;

import java.util.Collection;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;

/**
 * A node's cache of channels, one per peer, for providers: the first thread that asks for a peer
 * without an open channel opens one, and threads asking meanwhile wait for that same attempt (bounded)
 * instead of opening their own.
 *
 * @param <C> the provider's channel type
 */
public final class PeerChannels<C extends RdmaChannel> {
    /** Opens a channel to a peer (with the provider's own timeouts and retries). */
    @FunctionalInterface
    public interface Opener<C> {
        C open(NodeAddress peer) throws TransportException;
    }

    /** Throws when the node is closed. */
    @FunctionalInterface
    public interface OpenCheck {
        void check() throws TransportException;
    }

    private final ConcurrentHashMap<NodeAddress, C> channels = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<NodeAddress, CompletableFuture<C>> connecting = new ConcurrentHashMap<>();
    private final OpenCheck nodeOpen;
    private final Consumer<C> discard;

    /**
     * @param nodeOpen throws once the node is closed
     * @param discard closes a channel that was opened while the node closed
     */
    public PeerChannels(OpenCheck nodeOpen, Consumer<C> discard) {
        this.nodeOpen = nodeOpen;
        this.discard = discard;
    }

    /**
     * The open channel to {@code peer}, opening one with {@code opener} when there is none.
     *
     * @param waitMs how long to wait for another thread's attempt to the same peer
     */
    public C get(NodeAddress peer, long waitMs, Opener<C> opener) throws TransportException {
        for (;;) {
            nodeOpen.check();
            C c = channels.get(peer);
            if (c != null && c.isOpen()) {
                return c;
            }
            CompletableFuture<C> mine = new CompletableFuture<>();
            CompletableFuture<C> other = connecting.putIfAbsent(peer, mine);
            if (other != null) {
                awaitOther(peer, other, waitMs);
                continue;
            }
            try {
                C fresh = opener.open(peer);
                channels.put(peer, fresh);
                mine.complete(fresh);
                try {
                    nodeOpen.check();
                } catch (TransportException closedMeanwhile) {
                    discard.accept(fresh);
                    throw closedMeanwhile;
                }
                return fresh;
            } catch (TransportException | RuntimeException e) {
                mine.completeExceptionally(e);
                throw e;
            } finally {
                connecting.remove(peer, mine);
            }
        }
    }

    private static void awaitOther(NodeAddress peer, CompletableFuture<?> other, long waitMs)
            throws TransportException {
        try {
            Pauses.get(other, waitMs); // this JVM's pauses not counted
        } catch (ExecutionException e) {
            if (e.getCause() instanceof TransportException te) {
                throw te;
            }
            throw new TransportException("connecting to " + peer + " failed", e.getCause());
        } catch (TimeoutException e) {
            throw new TransportException("timed out waiting for another thread's connect to " + peer, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException("interrupted while connecting to " + peer, e);
        }
    }

    /** Forgets {@code c} (when it closed), unless another channel has replaced it already. */
    public void remove(C c) {
        channels.remove(c.peer(), c);
    }

    /** The channels cached now (a live view). */
    public Collection<C> all() {
        return channels.values();
    }
}
