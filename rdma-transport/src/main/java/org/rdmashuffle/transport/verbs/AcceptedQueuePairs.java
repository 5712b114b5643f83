package org.rdmashuffle.transport.verbs;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BooleanSupplier;

/**
 * The queue pairs a node has accepted or is accepting, whichever API accepts them: what bounds them and
 * what reaps them.
 *
 * <ul>
 *   <li><b>Caps.</b> At most {@code maxPerNode} queue pairs at once (connecting or connected), at most
 *       {@code maxPerAddress} of them from one source address. A connect request past either cap is
 *       refused before any queue pair exists, whatever it carries; so is one its authorisation refuses
 *       (asked only within the caps, so that a refused request never uses up a peer's admission).</li>
 *   <li><b>Liveness.</b> A connected queue pair is reaped when no keep-alive named it for the idle
 *       timeout ({@link #idle}): a requester sends one per channel every third of that timeout over its
 *       control connection, so a queue pair whose peer went away without a word (a host that lost power
 *       sends no disconnect) does not stay in RTS until the node closes.</li>
 *   <li><b>Order of events.</b> A device learns that a queue pair went away ({@link Entry#gone}) and that
 *       it is connected ({@link Entry#connected}) on different threads, in either order. One that went
 *       away first is never recorded as connected: {@code connected} returns false and the caller
 *       closes it, so no accepted queue pair is left open and untracked.</li>
 * </ul>
 *
 * <p>Thread-safe: one monitor, taken per connect request, per keep-alive and per reaper pass, never on
 * the READ path (accepted queue pairs post nothing).
 */
final class AcceptedQueuePairs {
    /** Why a connect request was refused. */
    enum Refusal {
        NODE_CAP("the node accepts at most spark.shuffle.rdma.maxConnections queue pairs"),
        ADDRESS_CAP("one source address may hold at most spark.shuffle.rdma.maxConnectionsPerAddress queue pairs"),
        NOT_AUTHORISED("no authenticated peer announced it, or its proof of the application's secret is missing "
                + "or wrong (spark.authenticate is on)");

        final String why;

        Refusal(String why) {
            this.why = why;
        }
    }

    private static final int CONNECTING = 0;
    private static final int CONNECTED = 1;
    private static final int GONE = 2;

    private final int maxPerNode;
    private final int maxPerAddress;
    private final Map<InetAddress, Integer> perAddress = new HashMap<>();
    private final Map<InetSocketAddress, Entry> byPeer = new HashMap<>();
    private int size;

    AcceptedQueuePairs(int maxPerNode, int maxPerAddress) {
        this.maxPerNode = maxPerNode;
        this.maxPerAddress = maxPerAddress;
    }

    /** What became of a connect request: an entry, or why there is none. */
    record Admission(Entry entry, Refusal refusal) {
    }

    /**
     * What an admitted queue pair is bound to: the realm it was admitted for ({@code null}: none), the
     * protection domain it is created in ({@code null}: the device's default one), and what lets go of that
     * domain once the queue pair is destroyed ({@link Entry#destroyed}).
     */
    record Binding(String realm, VerbsDevice.Domain domain, Runnable release) {
        static final Binding NONE = new Binding(null, null, () -> { });
    }

    /**
     * Admits a connect request from {@code from} when both caps leave room and {@code authorised} (asked
     * only then, and at most once) says yes.
     */
    synchronized Admission admit(InetSocketAddress from, BooleanSupplier authorised, long nowNanos) {
        return admit(from, () -> authorised.getAsBoolean() ? Binding.NONE : null, nowNanos);
    }

    /**
     * Admits a connect request from {@code from} when both caps leave room and {@code authorise} (asked
     * only then, and at most once) binds it (null: refused).
     */
    synchronized Admission admit(InetSocketAddress from, java.util.function.Supplier<Binding> authorise,
                                 long nowNanos) {
        if (size >= maxPerNode) {
            return new Admission(null, Refusal.NODE_CAP);
        }
        InetAddress ip = from.getAddress();
        if (perAddress.getOrDefault(ip, 0) >= maxPerAddress) {
            return new Admission(null, Refusal.ADDRESS_CAP);
        }
        Binding b = authorise.get();
        if (b == null) {
            return new Admission(null, Refusal.NOT_AUTHORISED);
        }
        Entry e = new Entry(from, nowNanos, b);
        size++;
        perAddress.merge(ip, 1, Integer::sum);
        byPeer.put(from, e);
        return new Admission(e, null);
    }

    /** Queue pairs held now (connecting or connected). */
    synchronized int size() {
        return size;
    }

    /** Queue pairs held now from {@code ip}. */
    synchronized int from(InetAddress ip) {
        return perAddress.getOrDefault(ip, 0);
    }

    /** A keep-alive from the requester's queue pair at {@code peer}: it is alive. */
    void touch(InetSocketAddress peer, long nowNanos) {
        Entry e;
        synchronized (this) {
            e = byPeer.get(peer);
        }
        if (e != null) {
            e.lastSeenNanos = nowNanos;
        }
    }

    /**
     * The closers of connected queue pairs no keep-alive named for {@code idleNanos}; each is returned
     * once (it leaves through {@link Entry#gone} when its queue pair is closed).
     */
    synchronized List<Runnable> idle(long nowNanos, long idleNanos) {
        List<Runnable> out = null;
        for (Entry e : byPeer.values()) {
            if (e.state == CONNECTED && !e.reaped && nowNanos - e.lastSeenNanos > idleNanos) {
                e.reaped = true;
                if (out == null) {
                    out = new ArrayList<>();
                }
                out.add(e.closer);
            }
        }
        return out == null ? List.of() : out;
    }

    /**
     * The realm is closed: its connected queue pairs' closers (each returned once), and its queue pairs still
     * connecting are never recorded as connected ({@link Entry#connected} returns false: their device closes
     * them).
     */
    synchronized List<Runnable> closeRealm(String realm) {
        List<Runnable> out = new ArrayList<>();
        for (Entry e : byPeer.values()) {
            if (realm.equals(e.binding.realm())) {
                e.realmClosed = true;
                if (e.state == CONNECTED && !e.reaped) {
                    e.reaped = true;
                    out.add(e.closer);
                }
            }
        }
        return out;
    }

    private void remove(Entry e) {
        size--;
        InetAddress ip = e.from.getAddress();
        perAddress.computeIfPresent(ip, (k, n) -> n == 1 ? null : n - 1);
        byPeer.remove(e.from, e);
    }

    /** One accepted queue pair. */
    final class Entry {
        final InetSocketAddress from;
        private final Binding binding;
        private volatile long lastSeenNanos;
        private final java.util.concurrent.atomic.AtomicBoolean released = new java.util.concurrent.atomic.AtomicBoolean();
        // Guarded by AcceptedQueuePairs.this.
        private int state = CONNECTING;
        private boolean reaped;
        private boolean realmClosed;
        private Runnable closer;

        private Entry(InetSocketAddress from, long nowNanos, Binding binding) {
            this.from = from;
            this.lastSeenNanos = nowNanos;
            this.binding = binding;
        }

        /** The realm the queue pair was admitted for, or null. */
        String realm() {
            return binding.realm();
        }

        /** The protection domain to create the queue pair in, or null for the device's default one. */
        VerbsDevice.Domain domain() {
            return binding.domain();
        }

        /**
         * The queue pair is destroyed (or was never created): it lets go of its realm's protection domain.
         * Devices call it once the queue pair no longer exists, never before (a domain is deallocated only
         * when nothing is in it). Idempotent.
         */
        void destroyed() {
            if (released.compareAndSet(false, true)) {
                binding.release().run();
            }
        }

        /**
         * The queue pair is connected; {@code closer} closes it (for the reaper; it must not block).
         *
         * @return false when it went away before: the caller closes it now
         */
        boolean connected(Runnable closer, long nowNanos) {
            synchronized (AcceptedQueuePairs.this) {
                if (state == GONE || realmClosed) {
                    return false;
                }
                state = CONNECTED;
                this.closer = closer;
                lastSeenNanos = nowNanos;
                return true;
            }
        }

        /**
         * The queue pair went away or is being closed: it leaves the caps. Idempotent.
         *
         * @return true the first time for a queue pair recorded as connected (whoever reports a disconnect
         *     then closes it); false when it was still connecting (the device's accept path closes it, see
         *     {@link #connected}) or had gone already
         */
        boolean gone() {
            synchronized (AcceptedQueuePairs.this) {
                if (state == GONE) {
                    return false;
                }
                boolean wasConnected = state == CONNECTED;
                state = GONE;
                remove(this);
                return wasConnected;
            }
        }

        boolean isConnected() {
            synchronized (AcceptedQueuePairs.this) {
                return state == CONNECTED;
            }
        }
    }
}
