package org.rdmashuffle.transport.verbs;

import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * With {@code spark.authenticate} on, which connect requests a node accepts a queue pair for: those an
 * authenticated peer announced over its control connection ("admit"), each announcement good for one
 * queue pair until its deadline.
 *
 * <p>When both ends can carry rdma_cm private data (the {@code java.lang.foreign} API), the announcement
 * is answered with a fresh random nonce, and the connect request must carry a proof: HMAC-SHA256 of the
 * application's secret over a label, the nonce and the requester's RDMA address ({@link #proof}). The
 * nonce is single-use, bound to the address it was handed to, and expires; it is spent only by a valid
 * proof, so a request with a missing or wrong proof spends nothing. Only the holder of the secret who
 * asked for the nonce can then get the queue pair — not another process on the same host racing the
 * legitimate connect with the right source address.
 *
 * <p>When either end cannot (DiSNI 2.1's libdisni drops private data on the accepting side, and the
 * provider does not send it through DiSNI), the announcement admits one connect request from the
 * announced address, as before: another process on that host could race for it (docs/verbs.md). Such
 * an address admission exists only when a peer asked for one, so a racer can never take the place of a
 * peer that proves.
 *
 * <p>On a node with a secret per realm ({@link org.rdmashuffle.transport.NodeOptions#secrets()}), the nonce
 * records the realm of the authenticated control connection that asked for it, and the proof must be made
 * with that realm's secret (looked up when the request comes: a realm its resolver forgot admits nothing).
 * The admitted queue pair is then bound to that realm ({@link #admitFor}). Such a node issues nonces only:
 * no address admissions.
 *
 * <p>Bounded: at most {@link #MAX_PER_ADDRESS} pending admissions per address (older ones are dropped)
 * and {@link #MAX_ADDRESSES} addresses (expired ones are dropped first, then the request is refused).
 * Thread-safe.
 */
final class QueuePairAdmissions {
    static final int NONCE_BYTES = 16;
    static final int MAC_BYTES = 32;
    /** 'R' 'Q', version 1, nonce, mac: 51 bytes, within the 56 rdma_cm leaves on InfiniBand and RoCE. */
    static final int PROOF_BYTES = 3 + NONCE_BYTES + MAC_BYTES;
    private static final byte MAGIC_0 = 'R';
    private static final byte MAGIC_1 = 'Q';
    private static final byte VERSION = 1;
    private static final byte[] LABEL = "rdma-shuffle verbs queue pair v1".getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    static final int MAX_PER_ADDRESS = 64;
    static final int MAX_ADDRESSES = 1024;
    private static final SecureRandom RANDOM = new SecureRandom();

    private record Pending(InetAddress from, long deadlineNanos, String realm) {
    }

    /** An admitted connect request: the realm its nonce was issued for (null: none). */
    record Admitted(String realm) {
    }

    private static final Admitted NO_REALM = new Admitted(null);

    private final byte[] secret;
    /** The secret of each realm, on a node with realms; else null. */
    private final org.rdmashuffle.transport.SecretResolver secrets;
    private final Map<ByteBuffer, Pending> nonces = new HashMap<>();
    private final Map<InetAddress, ArrayDeque<ByteBuffer>> noncesByAddress = new HashMap<>();
    private final Map<InetAddress, ArrayDeque<Long>> addresses = new HashMap<>();

    QueuePairAdmissions(byte[] secret) {
        this(secret, null);
    }

    /**
     * @param secret the node's one secret, for nonces issued for no realm (null when it has none)
     * @param secrets the secret of each realm, or null on a node without realms
     */
    QueuePairAdmissions(byte[] secret, org.rdmashuffle.transport.SecretResolver secrets) {
        this.secret = secret == null ? null : secret.clone();
        this.secrets = secrets;
    }

    /** A nonce for one queue pair from {@code from}, for no realm; see {@link #issueNonce(InetAddress, String, long, long)}. */
    synchronized byte[] issueNonce(InetAddress from, long deadlineNanos, long nowNanos) {
        return issueNonce(from, null, deadlineNanos, nowNanos);
    }

    /**
     * A nonce for one queue pair from {@code from}, valid until {@code deadlineNanos}, whose proof must be
     * made with {@code realm}'s secret (null: the node's one secret).
     *
     * @return the nonce, or null when too many addresses have admissions pending
     */
    synchronized byte[] issueNonce(InetAddress from, String realm, long deadlineNanos, long nowNanos) {
        if (!roomFor(from, nowNanos)) {
            return null;
        }
        byte[] n = new byte[NONCE_BYTES];
        RANDOM.nextBytes(n);
        ByteBuffer key = ByteBuffer.wrap(n);
        ArrayDeque<ByteBuffer> q = noncesByAddress.computeIfAbsent(from, a -> new ArrayDeque<>());
        if (q.size() == MAX_PER_ADDRESS) {
            nonces.remove(q.pollFirst());
        }
        q.addLast(key);
        nonces.put(key, new Pending(from, deadlineNanos, realm));
        return n.clone();
    }

    /** One proofless queue pair from {@code from} (a peer that cannot send a proof), until {@code deadlineNanos}. */
    synchronized boolean admitAddress(InetAddress from, long deadlineNanos, long nowNanos) {
        if (!roomFor(from, nowNanos)) {
            return false;
        }
        ArrayDeque<Long> q = addresses.computeIfAbsent(from, a -> new ArrayDeque<>());
        if (q.size() == MAX_PER_ADDRESS) {
            q.pollFirst();
        }
        q.addLast(deadlineNanos);
        return true;
    }

    private boolean roomFor(InetAddress from, long nowNanos) {
        if (noncesByAddress.containsKey(from) || addresses.containsKey(from)
                || noncesByAddress.size() + addresses.size() < MAX_ADDRESSES) {
            return true;
        }
        dropExpired(nowNanos);
        return noncesByAddress.size() + addresses.size() < MAX_ADDRESSES;
    }

    private void dropExpired(long nowNanos) {
        for (Iterator<ArrayDeque<ByteBuffer>> it = noncesByAddress.values().iterator(); it.hasNext();) {
            ArrayDeque<ByteBuffer> q = it.next();
            q.removeIf(k -> {
                Pending p = nonces.get(k);
                if (p == null || p.deadlineNanos() - nowNanos <= 0) {
                    nonces.remove(k);
                    return true;
                }
                return false;
            });
            if (q.isEmpty()) {
                it.remove();
            }
        }
        addresses.values().removeIf(q -> {
            q.removeIf(d -> d - nowNanos <= 0);
            return q.isEmpty();
        });
    }

    /**
     * Whether a connect request from {@code from} carrying {@code privateData} (null or empty: none) may
     * have a queue pair; spends the admission it uses. A request that carries a proof is judged by it
     * alone; one without uses an address admission.
     */
    synchronized boolean admit(InetAddress from, byte[] privateData, long nowNanos) {
        return admitFor(from, privateData, nowNanos) != null;
    }

    /**
     * As {@link #admit}: what the request was admitted for (the realm of its nonce), or null when refused.
     */
    synchronized Admitted admitFor(InetAddress from, byte[] privateData, long nowNanos) {
        if (isProof(privateData)) {
            ByteBuffer key = ByteBuffer.wrap(privateData, 3, NONCE_BYTES).slice();
            Pending p = nonces.get(key);
            if (p == null || !p.from().equals(from) || p.deadlineNanos() - nowNanos <= 0) {
                return null;
            }
            byte[] proven = p.realm() == null ? secret : secrets == null ? null : secrets.secretOf(p.realm());
            if (proven == null || proven.length == 0) {
                return null; // the realm is no longer known here (or the node has no secret for none)
            }
            byte[] nonce = new byte[NONCE_BYTES];
            System.arraycopy(privateData, 3, nonce, 0, NONCE_BYTES);
            byte[] expected = mac(proven, nonce, from);
            byte[] got = new byte[MAC_BYTES];
            System.arraycopy(privateData, 3 + NONCE_BYTES, got, 0, MAC_BYTES);
            if (!MessageDigest.isEqual(expected, got)) {
                return null; // spends nothing: the peer that asked for the nonce may still use it
            }
            nonces.remove(key);
            ArrayDeque<ByteBuffer> q = noncesByAddress.get(from);
            if (q != null) {
                q.remove(key);
                if (q.isEmpty()) {
                    noncesByAddress.remove(from);
                }
            }
            return p.realm() == null ? NO_REALM : new Admitted(p.realm());
        }
        if (secrets != null) {
            return null; // a node with realms admits no address
        }
        ArrayDeque<Long> q = addresses.get(from);
        while (q != null && !q.isEmpty()) {
            if (q.pollFirst() - nowNanos > 0) {
                if (q.isEmpty()) {
                    addresses.remove(from);
                }
                return NO_REALM;
            }
        }
        addresses.remove(from);
        return null;
    }

    /** Forgets every nonce issued for {@code realm} (the realm is closed). */
    synchronized void dropRealm(String realm) {
        for (Iterator<Map.Entry<ByteBuffer, Pending>> it = nonces.entrySet().iterator(); it.hasNext();) {
            Map.Entry<ByteBuffer, Pending> e = it.next();
            if (realm.equals(e.getValue().realm())) {
                it.remove();
                ArrayDeque<ByteBuffer> q = noncesByAddress.get(e.getValue().from());
                if (q != null) {
                    q.remove(e.getKey());
                    if (q.isEmpty()) {
                        noncesByAddress.remove(e.getValue().from());
                    }
                }
            }
        }
    }

/** Admissions pending now (nonces and addresses), for tests. */
    synchronized int pending() {
        int n = nonces.size();
        for (ArrayDeque<Long> q : addresses.values()) {
            n += q.size();
        }
        return n;
    }

    static boolean isProof(byte[] privateData) {
        return privateData != null && privateData.length >= PROOF_BYTES && privateData[0] == MAGIC_0
                && privateData[1] == MAGIC_1 && privateData[2] == VERSION;
    }

    /** The private data a requester at {@code from} sends with its connect request for {@code nonce}. */
    static byte[] proof(byte[] secret, byte[] nonce, InetAddress from) {
        if (nonce.length != NONCE_BYTES) {
            throw new IllegalArgumentException("nonce of " + nonce.length + " bytes");
        }
        byte[] d = new byte[PROOF_BYTES];
        d[0] = MAGIC_0;
        d[1] = MAGIC_1;
        d[2] = VERSION;
        System.arraycopy(nonce, 0, d, 3, NONCE_BYTES);
        System.arraycopy(mac(secret, nonce, from), 0, d, 3 + NONCE_BYTES, MAC_BYTES);
        return d;
    }

    private static byte[] mac(byte[] secret, byte[] nonce, InetAddress from) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            mac.update(LABEL);
            mac.update(nonce);
            mac.update(from.getAddress());
            return mac.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }
}
