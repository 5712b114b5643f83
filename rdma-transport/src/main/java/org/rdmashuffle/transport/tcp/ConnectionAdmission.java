package org.rdmashuffle.transport.tcp;

import static org.rdmashuffle.transport.tcp.TcpResponder.LOG;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.rdmashuffle.transport.RateLimitedLog;

/**
 * Accepting connections and keeping the responder's limits: the node's {@code maxConnections}, the
 * handshake slots, each source address's share, and which connection goes when room is needed.
 * Responder thread only.
 *
 * <p>Room is made, in this order, from a connection draining after an error reply, from one still in its
 * handshake past a grace period (or of the address holding the most handshake slots), and, at
 * {@code maxConnections}, from the handshaken connection that has been silent longest, if silent for
 * {@link #IDLE_EVICTION_SILENCE_NANOS} at least. Handshaken connections are kept in order of their last
 * activity (a request frame parsed, reply bytes written) in a list linked through the connections, so
 * finding that one is O(1) however many connections there are and whatever a flood does; a connection
 * in use moves to the list's tail on its activity, so it is the last to go.
 *
 * <p>A silent connection goes only for a newcomer that finished its handshake (with a secret: proved it).
 * At {@code maxConnections} a newcomer is admitted past the cap into a handshake slot when a silent
 * connection could go (one newcomer per such connection at most, {@link #owingRoom}); when its handshake
 * succeeds the silent one is closed for it ({@link #roomForAuthenticated}), and if none is silent any more
 * by then, the newcomer's welcome says busy. The one that goes is closed in order and only with nothing
 * owed to its peer ({@link #evictIdlest}), so its peer's channel reports that nothing outstanding was
 * served, and its holders connect again.
 */
final class ConnectionAdmission {
    /**
     * A handshaking connection younger than this is never evicted to make room (its HELLO may simply not
     * be read yet); a new connection that finds only such ones is refused busy and retries.
     */
    private static final long HANDSHAKE_GRACE_NANOS = 250_000_000L;
    /** A handshaken connection silent for less than this is never closed to make room for a newcomer. */
    static final long IDLE_EVICTION_SILENCE_NANOS = 1_000_000_000L;
    /**
     * Silent connections looked at for one eviction at most: one owing its peer a reply, or found active when
     * what arrived is taken up, is passed over for the next.
     */
    private static final int EVICTION_CANDIDATES = 4;
    /** Evictions of idle connections are logged at most once per this interval, with their count. */
    private static final long EVICTION_LOG_INTERVAL_NANOS = 10_000_000_000L;

    /** The connections one source address holds; touched by the responder thread only. */
    static final class Source {
        final InetAddress address;
        int connections;
        int handshaking;

        Source(InetAddress address) {
            this.address = address;
        }
    }

    private final TcpResponder responder;
    private final TcpResponder.Limits limits;
    private final ServerSocketChannel server;
    private final Selector selector;
    private final List<ServedConnection> connections = new ArrayList<>();
    /** Connections by source address, for the per-address cap; an entry goes when its last connection does. */
    private final Map<InetAddress, Source> sources = new HashMap<>();
    /** Handshaken connections of each realm (an entry goes with its last connection), for the realm's share. */
    private final Map<String, Integer> realmConnections = new HashMap<>();
    /** The handshaken connections counted in {@link #realmConnections}, and the realm each counts for. */
    private final Map<ServedConnection, String> countedForRealm = new HashMap<>();
    private final RateLimitedLog refusalLog = new RateLimitedLog(LOG, 10_000);
    /** Handshaken, not draining connections, least recently active first. */
    private ServedConnection idlest;
    private ServedConnection busiest;
    private boolean evictionLogged;
    private long lastEvictionLogNanos;
    private long evictionsSinceLog;
    int handshaking;
    int draining;
    /**
     * With a secret: newcomers admitted past {@code maxConnections} into a handshake slot, for whom an idle
     * connection is closed once they prove the secret (never before); they do not count against the cap.
     */
    int owingRoom;

    ConnectionAdmission(TcpResponder responder, ServerSocketChannel server, Selector selector) {
        this.responder = responder;
        this.limits = responder.limits;
        this.server = server;
        this.selector = selector;
    }

    void accept() throws IOException {
        SocketChannel ch;
        for (int accepted = 0; accepted < TcpResponder.ACCEPT_BUDGET && (ch = server.accept()) != null; accepted++) {
            InetAddress from = null;
            try {
                SocketAddress r = ch.getRemoteAddress();
                from = r instanceof InetSocketAddress isa ? isa.getAddress() : null;
            } catch (IOException e) {
                LOG.debug("remote address of an accepted connection", e);
            }
            Source src = from == null ? null : sources.get(from);
            // At its address's cap: a connection draining after an error reply goes first, then the address's
            // oldest connection still in its handshake past the grace period — so silent sockets of someone
            // without the secret on an honest peer's host cannot lock that host out.
            if (src != null && src.connections >= limits.maxConnectionsPerAddress() && !evictOldestDraining(src)
                    && !evictOldestHandshaking(src)) {
                responder.connectionsRefusedPerAddress++;
                refuseBusy(ch, src);
                continue;
            }
            if (connections.size() - owingRoom >= limits.maxConnections()) {
                // A connection draining after an error reply is worth less than a new one.
                evictOldestDraining(null);
            }
            if (handshaking >= limits.maxHandshaking()) {
                evictForHandshake();
            }
            boolean owesRoom = false;
            if (connections.size() - owingRoom >= limits.maxConnections() && handshaking < limits.maxHandshaking()) {
                int room = evictable();
                if (owingRoom >= room && room > 0) {
                    evictOwingPastGrace(); // a newcomer that owes room and has not handshaken in time gives way
                }
                if (owingRoom < room) {
                    // Admitted past the cap into a handshake slot; room is made only once it finished its
                    // handshake (roomForAuthenticated): with a secret, a raw connect of someone without it evicts
                    // nobody, and without one, a socket that never says HELLO evicts nobody either.
                    owesRoom = true;
                }
            }
            if ((!owesRoom && connections.size() - owingRoom >= limits.maxConnections())
                    || handshaking >= limits.maxHandshaking()) {
                refuseBusy(ch, null);
                continue;
            }
            try {
                ch.configureBlocking(false);
                ch.socket().setTcpNoDelay(true);
                TcpNode.applyTos(ch, responder.ipTos);
                // Looked up again: an eviction above may have closed the address's last connection.
                src = from == null ? null : sources.get(from);
                if (src == null && from != null) {
                    src = new Source(from);
                    sources.put(from, src);
                }
                ServedConnection c = new ServedConnection(responder, ch, src);
                c.key = ch.register(selector, SelectionKey.OP_READ, c);
                connections.add(c);
                responder.connectionCount = connections.size();
                handshaking++;
                if (owesRoom) {
                    c.owesRoom = true;
                    owingRoom++;
                }
                if (src != null) {
                    src.connections++;
                    src.handshaking++;
                }
            } catch (IOException | RuntimeException e) {
                if (src != null && src.connections == 0) {
                    sources.remove(src.address, src);
                }
                ch.close();
                throw e;
            }
        }
    }

    /**
     * Answers a connection past a limit with handshake status busy and closes it at once; {@code src} is
     * the source address that holds its cap, or null for the node's limits.
     */
    private void refuseBusy(SocketChannel ch, Source src) {
        responder.connectionsRefused++;
        String remote = "?";
        try {
            remote = String.valueOf(ch.getRemoteAddress());
            ch.configureBlocking(false);
            ByteBuffer b = ByteBuffer.allocate(Wire.CHALLENGE_BYTES);
            b.putInt(Wire.MAGIC).putShort(Wire.VERSION).putShort((short) Wire.HS_BUSY).put(new byte[Wire.NONCE_BYTES]);
            ch.write(b.flip());
        } catch (IOException e) {
            LOG.debug("refusing {}", remote, e);
        } finally {
            try {
                ch.close();
            } catch (IOException e) {
                LOG.debug("closing refused {}", remote, e);
            }
        }
        if (src != null) {
            refusalLog.warn("refused a connection from {}: its address holds {} connections; limit {}={}", remote,
                    src.connections, limits.keys().maxConnectionsPerAddress, limits.maxConnectionsPerAddress());
        } else {
            refusalLog.warn("refused a connection from {}: {} connections served ({} handshaking, none of the others "
                            + "silent for a second); limits {}={}, {}={}", remote, connections.size(), handshaking,
                    limits.keys().maxConnections, limits.maxConnections(), limits.keys().maxHandshakingConnections,
                    limits.maxHandshaking());
        }
    }

    /**
     * Makes room for a new connection in the handshake by resetting one still in its handshake: the
     * oldest of the source address that holds the most handshake slots, if it holds more than one (so
     * one host cannot keep every slot, however young its sockets); else the oldest older than a grace
     * period (one that has not finished a single round trip by then is far likelier a silent peer than a
     * slow one). A refused or failed handshake holds no slot at all.
     */
    private void evictForHandshake() {
        ServedConnection victim = null;
        int victimWeight = 0;
        long now = System.nanoTime();
        for (int i = 0; i < connections.size(); i++) {
            ServedConnection c = connections.get(i);
            if (!c.inHandshake) {
                continue;
            }
            int weight = c.source == null ? 1 : c.source.handshaking;
            if (weight <= 1 && now - c.acceptedNanos <= HANDSHAKE_GRACE_NANOS) {
                continue;
            }
            if (victim == null || weight > victimWeight
                    || (weight == victimWeight && c.acceptedNanos - victim.acceptedNanos < 0)) {
                victim = c;
                victimWeight = weight;
            }
        }
        if (victim != null) {
            responder.connectionsClosedByLimit++;
            responder.limitLog.warn("closing connection from {}: still in its handshake when a new connection came "
                    + "past {}={} ({} handshaking from its address)", victim.remote,
                    limits.keys().maxHandshakingConnections, limits.maxHandshaking(), victimWeight);
            victim.abort();
        }
    }

    /**
     * Resets the connection of {@code src}'s address that has been in its handshake longest, if longer than
     * the grace period; true if there was one. An honest peer finishes its handshake in a round trip or two,
     * so what is left past the grace is silent or slow on purpose.
     */
    private boolean evictOldestHandshaking(Source src) {
        if (src.handshaking == 0) {
            return false;
        }
        long now = System.nanoTime();
        ServedConnection oldest = null;
        for (int i = 0; i < connections.size(); i++) {
            ServedConnection c = connections.get(i);
            if (c.inHandshake && c.source == src && now - c.acceptedNanos > HANDSHAKE_GRACE_NANOS
                    && (oldest == null || c.acceptedNanos - oldest.acceptedNanos < 0)) {
                oldest = c;
            }
        }
        if (oldest == null) {
            return false;
        }
        responder.connectionsClosedByLimit++;
        responder.limitLog.warn("closing connection from {}: still in its handshake when its address reached {}={}",
                oldest.remote, limits.keys().maxConnectionsPerAddress, limits.maxConnectionsPerAddress());
        oldest.abort();
        return true;
    }

    /** Resets the connection that has drained longest (of {@code only}'s address, when given); true if there was one. */
    boolean evictOldestDraining(Source only) {
        if (draining == 0) {
            return false;
        }
        ServedConnection oldest = null;
        for (int i = 0; i < connections.size(); i++) {
            ServedConnection c = connections.get(i);
            if (c.isDraining() && (only == null || c.source == only)
                    && (oldest == null || c.drainSinceNanos - oldest.drainSinceNanos < 0)) {
                oldest = c;
            }
        }
        if (oldest == null) {
            return false;
        }
        responder.connectionsClosedByLimit++;
        responder.limitLog.warn("closing connection from {}: draining after an error reply when room was needed (at "
                + "most {}={} drain at once)", oldest.remote, limits.keys().maxHandshakingConnections,
                limits.maxDraining());
        oldest.abort();
        return true;
    }

    /**
     * At {@code maxConnections}: closes the handshaken connection silent longest, if silent for a second at
     * least, so that connections which authenticated and then went quiet cannot keep honest newcomers out.
     * O(1): the head of the activity list, and at most {@link #EVICTION_CANDIDATES} after it.
     *
     * <p>The one that goes is closed in order (a FIN, never a reset), and only with nothing owed to its peer: no
     * reply bytes queued or being written (such a connection is skipped). What arrived since its last turn is
     * taken up first: a request that came is answered and the connection, active again, stays; bytes of a frame
     * that does not complete are no activity. So every request its peer sent and got no byte of reply for was
     * never read: the peer's channel, seeing the connection closed with no reply under way, reports
     * {@link org.rdmashuffle.transport.ReadStatus#IDLE_CLOSED} (connect again and post again), and an honest peer
     * that only paused (a GC, decoding a large block) loses nothing and is blamed for nothing.
     */
    private void evictIdlest() {
        long now = System.nanoTime();
        ServedConnection c = idlest;
        for (int tried = 0; c != null && tried < EVICTION_CANDIDATES; tried++) {
            if (now - c.lastActiveNanos < IDLE_EVICTION_SILENCE_NANOS) {
                return; // the list is in order of activity: none after it is silent longer
            }
            ServedConnection next = c.moreActive;
            if (!c.replyPending()) {
                responder.serve(c); // takes up what arrived: a request that crossed the silence is answered
                if (c.isClosed()) {
                    return; // its peer had closed it, or it broke: room made without an eviction
                }
                if (c.inActivityList && now - c.lastActiveNanos >= IDLE_EVICTION_SILENCE_NANOS && !c.replyPending()) {
                    evict(c, now);
                    return;
                }
            }
            c = next;
        }
    }

    private void evict(ServedConnection c, long now) {
        responder.connectionsEvictedIdle++;
        evictionsSinceLog++;
        if (!evictionLogged || now - lastEvictionLogNanos >= EVICTION_LOG_INTERVAL_NANOS) {
            evictionLogged = true;
            LOG.info("closed {} connection(s) silent for a second or more (the last from {}, silent {} ms) to admit "
                            + "new ones at {}={}; {} closed so far", evictionsSinceLog, c.remote,
                    (now - c.lastActiveNanos) / 1_000_000, limits.keys().maxConnections, limits.maxConnections(),
                    responder.connectionsEvictedIdle);
            lastEvictionLogNanos = now;
            evictionsSinceLog = 0;
        }
        c.close(); // in order: its peer reads the end of the stream after every reply it was sent
    }

    /**
     * Handshaken connections silent for a second at least, counted from the idlest up to
     * {@link #EVICTION_CANDIDATES}: how many newcomers may wait past the cap for room.
     */
    private int evictable() {
        long now = System.nanoTime();
        int n = 0;
        for (ServedConnection c = idlest; c != null && n < EVICTION_CANDIDATES
                && now - c.lastActiveNanos >= IDLE_EVICTION_SILENCE_NANOS; c = c.moreActive) {
            n++;
        }
        return n;
    }

    /**
     * Resets the newcomer admitted past the cap (owing room) that has been in its handshake longest, if longer
     * than the grace period: sockets that never finish a handshake cannot hold the room silent connections
     * would make for honest newcomers.
     */
    private void evictOwingPastGrace() {
        long now = System.nanoTime();
        ServedConnection oldest = null;
        for (int i = 0; i < connections.size(); i++) {
            ServedConnection c = connections.get(i);
            if (c.owesRoom && now - c.acceptedNanos > HANDSHAKE_GRACE_NANOS
                    && (oldest == null || c.acceptedNanos - oldest.acceptedNanos < 0)) {
                oldest = c;
            }
        }
        if (oldest != null) {
            responder.connectionsClosedByLimit++;
            responder.limitLog.warn("closing connection from {}: still in its handshake, past {}={}, when a new "
                    + "connection came", oldest.remote, limits.keys().maxConnections, limits.maxConnections());
            oldest.abort();
        }
    }

    /**
     * {@code c}, admitted past {@code maxConnections} while owing room, proved the secret: an idle connection
     * is closed for it now ({@link #evictIdlest}); false when none could be, and {@code c} is refused busy.
     */
    boolean roomForAuthenticated(ServedConnection c) {
        if (!c.owesRoom) {
            return true;
        }
        c.owesRoom = false;
        owingRoom--;
        if (connections.size() - owingRoom > limits.maxConnections()) {
            evictIdlest();
        }
        return connections.size() - owingRoom <= limits.maxConnections();
    }

    /** Handshaken connections that authenticated for {@code realm} and are not closed. */
    int connectionsOfRealm(String realm) {
        return realmConnections.getOrDefault(realm, 0);
    }

    /**
     * Whether {@code c}, which proved its realm's secret, may be served: its realm holds fewer than {@code
     * maxConnectionsPerRealm} connections, so that one job's reducers cannot take every connection of a node that
     * serves many jobs (a newcomer past the share is refused busy and retries later; nobody is evicted for it).
     */
    boolean roomForRealm(ServedConnection c) {
        return connectionsOfRealm(c.realm) < limits.maxConnectionsPerRealm();
    }

    /** {@code c} is served from now on: it counts for its realm (if it named one) until it closes. */
    void servingRealm(ServedConnection c) {
        if (c.realm != null && countedForRealm.putIfAbsent(c, c.realm) == null) {
            realmConnections.merge(c.realm, 1, Integer::sum);
        }
    }

    /** {@code c} finished its handshake: it joins the activity list as the most recently active. */
    void handshaken(ServedConnection c, long now) {
        c.lastActiveNanos = now;
        c.lessActive = busiest;
        c.moreActive = null;
        if (busiest != null) {
            busiest.moreActive = c;
        } else {
            idlest = c;
        }
        busiest = c;
        c.inActivityList = true;
    }

    /** {@code c} (on the activity list) was active at {@code now}: it moves to the list's tail. No allocation. */
    void active(ServedConnection c, long now) {
        c.lastActiveNanos = now;
        if (c == busiest) {
            return;
        }
        unlink(c);
        handshaken(c, now);
    }

    /** {@code c} leaves the activity list (it drains or closes); nothing if it is not on it. */
    void unlink(ServedConnection c) {
        if (!c.inActivityList) {
            return;
        }
        ServedConnection less = c.lessActive;
        ServedConnection more = c.moreActive;
        if (less != null) {
            less.moreActive = more;
        } else {
            idlest = more;
        }
        if (more != null) {
            more.lessActive = less;
        } else {
            busiest = less;
        }
        c.lessActive = null;
        c.moreActive = null;
        c.inActivityList = false;
    }

    /** {@code c} gives back its handshake slot (handshake done, refused or failed, or the connection closed). */
    void leaveHandshake(ServedConnection c) {
        if (c.owesRoom) {
            c.owesRoom = false; // refused or closed before it proved the secret: it makes no room
            owingRoom--;
        }
        c.inHandshake = false;
        handshaking--;
        if (c.source != null) {
            c.source.handshaking--;
        }
    }

    /** {@code c} closed: its place on the node and on its address goes back. */
    void closed(ServedConnection c) {
        unlink(c);
        connections.remove(c);
        responder.connectionCount = connections.size();
        Source source = c.source;
        if (source != null && --source.connections == 0) {
            sources.remove(source.address, source);
        }
        String realm = countedForRealm.remove(c);
        if (realm != null) {
            realmConnections.computeIfPresent(realm, (r, n) -> n == 1 ? null : n - 1);
        }
    }

    /** Closes connections that outlived a deadline (handshake, frame, reply, idle, drain). */
    void expire(long now) {
        for (int i = connections.size() - 1; i >= 0; i--) {
            ServedConnection c = connections.get(i);
            String why = c.expiry(now);
            if (why != null) {
                responder.connectionsClosedByLimit++;
                responder.limitLog.warn("closing connection from {}: {}", c.remote, why);
                c.abort();
            }
        }
    }

    /** Closes every connection and the listening socket. */
    void closeAll() {
        for (int i = connections.size() - 1; i >= 0; i--) {
            try {
                connections.get(i).close();
            } catch (Throwable t) {
                LOG.debug("closing a served connection", t);
            }
        }
        connections.clear();
        responder.connectionCount = 0;
        owingRoom = 0;
        idlest = null;
        busiest = null;
        try {
            server.close();
        } catch (IOException e) {
            LOG.debug("closing the server socket", e);
        }
        sources.clear();
        realmConnections.clear();
        countedForRealm.clear();
    }
}
