package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.RateLimitedLog;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Which queue pairs peers may connect to a verbs node: the caps ({@code maxConnections},
 * {@code maxConnectionsPerAddress}), and with authentication on the queue pairs an authenticated peer
 * announced over the control connection (a nonce to prove, or an admitted source address). Counts and
 * logs (bounded) the refusals, and closes accepted queue pairs no keep-alive named for the idle timeout.
 */
final class QueuePairAcceptor {
    private static final Logger LOG = LoggerFactory.getLogger(VerbsNode.class); // the node's log, as before the split

    private final RdmaShuffleConf conf;
    /**
     * With authentication on: queue pairs announced over the authenticated control connection and not
     * yet connected (nonces for proofs, or source addresses); null with it off.
     */
    private final QueuePairAdmissions admissions;
    /** Queue pairs peers have connected (or are connecting) to this node: caps and liveness. */
    private final AcceptedQueuePairs accepted;
    private final LongAdder queuePairsReaped = new LongAdder();
    private final Object refusalLogLock = new Object();
    private final RateLimitedLog capLog = new RateLimitedLog(LOG, 10_000);
    private final Set<InetAddress> refusedFrom = ConcurrentHashMap.newKeySet();
    private final LongAdder queuePairsRefused = new LongAdder();

    /** The protection domain of each realm, on a node with realms; else null. */
    private final RealmDomains domains;

    QueuePairAcceptor(RdmaShuffleConf conf, byte[] secret) {
        this(conf, secret, null, null);
    }

    /**
     * @param secrets the secret of each realm (a node with realms: every queue pair proves one, and is created
     *        in its realm's domain from {@code domains}); null for a node without
     */
    QueuePairAcceptor(RdmaShuffleConf conf, byte[] secret, org.rdmashuffle.transport.SecretResolver secrets,
                      RealmDomains domains) {
        this.conf = conf;
        this.admissions = secret == null && secrets == null ? null : new QueuePairAdmissions(secret, secrets);
        this.domains = secrets == null ? null : domains;
        this.accepted = new AcceptedQueuePairs(conf.maxConnections(), conf.maxConnectionsPerAddress());
    }

    /**
     * Records one announced queue pair from {@code from}, valid for twice the connect timeout: a nonce when
     * the requester proves and this node's device reads proofs ({@code deviceReadsProofs}), else an
     * admission of the address.
     *
     * @return the nonce, or null
     */
    byte[] admit(InetAddress from, boolean proves, boolean deviceReadsProofs) {
        return admit(from, proves, deviceReadsProofs, null);
    }

    /**
     * As {@link #admit(InetAddress, boolean, boolean)}, asked over a control connection authenticated for
     * {@code realm} (null: none): on a node with realms the nonce is bound to it, and a requester that
     * cannot prove is refused (no address admissions there).
     */
    byte[] admit(InetAddress from, boolean proves, boolean deviceReadsProofs, String realm) {
        long now = System.nanoTime();
        long deadline = now + TimeUnit.MILLISECONDS.toNanos(2 * conf.connectTimeoutMs() + 5_000);
        if (admissions == null) {
            return null; // authentication is off here: every queue pair is admitted (within the caps)
        }
        if (domains != null && (realm == null || !proves || !deviceReadsProofs)) {
            throw new IllegalStateException("this node serves realms: a queue pair must carry a proof of its "
                    + "realm's secret in rdma_cm private data (spark.shuffle.rdma.verbs.api=ffm on both ends)");
        }
        if (proves && deviceReadsProofs) {
            byte[] nonce = admissions.issueNonce(from, realm, deadline, now);
            if (nonce == null) {
                throw new IllegalStateException("too many queue pair admissions pending");
            }
            return nonce;
        }
        if (!admissions.admitAddress(from, deadline, now)) {
            throw new IllegalStateException("too many queue pair admissions pending");
        }
        return null;
    }

    /** See {@link VerbsNode#admitQueuePair}. */
    AcceptedQueuePairs.Entry admitQueuePair(InetSocketAddress from, byte[] privateData) {
        if (from == null || from.getAddress() == null) {
            queuePairsRefused.increment();
            return null;
        }
        long now = System.nanoTime();
        InetAddress ip = from.getAddress();
        AcceptedQueuePairs.Admission a = accepted.admit(from, () -> bind(ip, privateData, now), now);
        if (a.entry() != null) {
            return a.entry();
        }
        queuePairsRefused.increment();
        if (a.refusal() == AcceptedQueuePairs.Refusal.NOT_AUTHORISED) {
            if (refusedFrom.size() < 1024 && refusedFrom.add(ip)) { // bounded: sources can be spoofed
                LOG.warn("verbs: refused a queue pair from {}: {}; later refusals from there are logged at DEBUG", ip,
                        a.refusal().why);
            } else {
                LOG.debug("verbs: refused a queue pair from {}: {}", ip, a.refusal().why);
            }
        } else {
            synchronized (refusalLogLock) {
                capLog.warn("verbs: refused a queue pair from {}: {} ({} held, {} from there)", ip, a.refusal().why,
                        accepted.size(), accepted.from(ip));
            }
        }
        return null;
    }

    /** The binding of an authorised connect request (its realm's domain), or null when refused. */
    private AcceptedQueuePairs.Binding bind(InetAddress ip, byte[] privateData, long now) {
        if (admissions == null) {
            return AcceptedQueuePairs.Binding.NONE;
        }
        QueuePairAdmissions.Admitted a = admissions.admitFor(ip, privateData, now);
        if (a == null) {
            return null;
        }
        if (a.realm() == null || domains == null) {
            return AcceptedQueuePairs.Binding.NONE;
        }
        try {
            RealmDomains.Lease lease = domains.acquire(a.realm());
            return new AcceptedQueuePairs.Binding(a.realm(), lease.domain(), lease::release);
        } catch (IOException | RuntimeException e) {
            LOG.warn("verbs: refused a queue pair from {}: no protection domain for its realm ({})", ip,
                    e.getMessage());
            return null;
        }
    }

    /**
     * Closes (through {@code node}'s workers) the queue pairs accepted for {@code realm}, and forgets the
     * nonces issued for it: its queue pairs still connecting never become connected.
     */
    void closeRealm(VerbsNode node, String realm) {
        if (admissions != null) {
            admissions.dropRealm(realm);
        }
        for (Runnable close : accepted.closeRealm(realm)) {
            node.execute(close);
        }
    }

    /** A keep-alive named the accepted queue pair at {@code qp} (the peer's end). */
    void touch(InetSocketAddress qp, long nowNanos) {
        accepted.touch(qp, nowNanos);
    }

    /** Closes (through {@code node}'s workers) the accepted queue pairs no keep-alive named for {@code idleNanos}. */
    void reapIdle(VerbsNode node, long nowNanos, long idleNanos) {
        for (Runnable close : accepted.idle(nowNanos, idleNanos)) {
            queuePairsReaped.increment();
            synchronized (refusalLogLock) {
                capLog.warn("verbs: closed a queue pair no keep-alive named for {} ({} ms): its peer went away "
                        + "without a word", conf.keyName(RdmaShuffleConf.IDLE_TIMEOUT), conf.idleTimeoutMs());
            }
            node.execute(close);
        }
    }

    /** Queue pairs accepted now (connecting or connected). */
    int size() {
        return accepted.size();
    }

    long reaped() {
        return queuePairsReaped.sum();
    }

    long refused() {
        return queuePairsRefused.sum();
    }
}
