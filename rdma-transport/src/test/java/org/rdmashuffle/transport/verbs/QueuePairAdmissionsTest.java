package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/**
 * Admissions of queue pairs with {@code spark.authenticate} on: a proof is bound to the secret, the
 * nonce and the requester's address; a nonce is spent once, only by a valid proof, and expires; a
 * request without a proof can use only an address admission a peer asked for.
 */
class QueuePairAdmissionsTest {
    private static final byte[] SECRET = "secret".getBytes(StandardCharsets.UTF_8);
    private static final long DEADLINE = 1_000;

    @Test
    void shouldAdmitAValidProofOnceAndOnlyFromTheAddressItWasHandedTo() throws Exception {
        InetAddress a = InetAddress.getByName("10.0.0.1");
        InetAddress b = InetAddress.getByName("10.0.0.2");
        QueuePairAdmissions q = new QueuePairAdmissions(SECRET);
        byte[] nonce = q.issueNonce(a, DEADLINE, 0);
        byte[] proof = QueuePairAdmissions.proof(SECRET, nonce, a);
        assertTrue(proof.length <= 56, "fits rdma_cm's private data on InfiniBand and RoCE");
        assertFalse(q.admit(b, QueuePairAdmissions.proof(SECRET, nonce, b), 10), "another address");
        assertFalse(q.admit(a, QueuePairAdmissions.proof("other".getBytes(StandardCharsets.UTF_8), nonce, a), 10),
                "another secret");
        assertFalse(q.admit(a, null, 10), "no proof: no address admission was asked for");
        assertTrue(q.admit(a, proof, 10), "a wrong proof spent nothing");
        assertFalse(q.admit(a, proof, 20), "single use");
        assertEquals(0, q.pending());
    }

    @Test
    void shouldRefuseAnExpiredNonceAndAReplayedOneAndATruncatedProof() throws Exception {
        InetAddress a = InetAddress.getByName("10.0.0.1");
        QueuePairAdmissions q = new QueuePairAdmissions(SECRET);
        byte[] late = q.issueNonce(a, DEADLINE, 0);
        assertFalse(q.admit(a, QueuePairAdmissions.proof(SECRET, late, a), DEADLINE + 1), "expired");
        byte[] nonce = q.issueNonce(a, DEADLINE, 0);
        byte[] proof = QueuePairAdmissions.proof(SECRET, nonce, a);
        assertFalse(q.admit(a, java.util.Arrays.copyOf(proof, proof.length - 1), 10), "truncated");
        assertTrue(q.admit(a, proof, 10));
        assertFalse(q.admit(a, proof, 10), "replayed");
    }

    @Test
    void shouldAdmitOneProoflessRequestPerAddressAdmission() throws Exception {
        InetAddress a = InetAddress.getByName("10.0.0.1");
        QueuePairAdmissions q = new QueuePairAdmissions(SECRET);
        assertTrue(q.admitAddress(a, DEADLINE, 0));
        assertFalse(q.admit(InetAddress.getByName("10.0.0.2"), null, 10));
        assertTrue(q.admit(a, new byte[0], 10));
        assertFalse(q.admit(a, null, 10), "one per announcement");
    }

    @Test
    void shouldNotAdmitIntoRealmAWhenTheProofIsMadeWithRealmBsSecret() throws Exception {
        InetAddress a = InetAddress.getByName("10.0.0.1");
        byte[] secretA = "job_A".getBytes(StandardCharsets.UTF_8);
        byte[] secretB = "job_B".getBytes(StandardCharsets.UTF_8);
        java.util.Map<String, byte[]> realms = new java.util.concurrent.ConcurrentHashMap<>(
                java.util.Map.of("job_A", secretA, "job_B", secretB));
        QueuePairAdmissions q = new QueuePairAdmissions(null, realms::get);
        byte[] nonce = q.issueNonce(a, "job_A", DEADLINE, 0);
        assertEquals(null, q.admitFor(a, QueuePairAdmissions.proof(secretB, nonce, a), 10), "realm B's secret");
        assertEquals(null, q.admitFor(a, QueuePairAdmissions.proof(SECRET, nonce, a), 10), "a secret of no realm");
        assertEquals("job_A", q.admitFor(a, QueuePairAdmissions.proof(secretA, nonce, a), 10).realm(),
                "bound to the realm the nonce was issued for; the wrong proofs spent nothing");
        assertEquals(0, q.pending());

        q.admitAddress(a, DEADLINE, 0);
        assertFalse(q.admit(a, null, 10), "a node with realms admits no address");
        byte[] forgotten = q.issueNonce(a, "job_A", DEADLINE, 0);
        realms.remove("job_A"); // its job finished: its resolver forgot it
        assertEquals(null, q.admitFor(a, QueuePairAdmissions.proof(secretA, forgotten, a), 10), "a forgotten realm");
        byte[] dropped = q.issueNonce(a, "job_B", DEADLINE, 0);
        q.dropRealm("job_B");
        assertEquals(null, q.admitFor(a, QueuePairAdmissions.proof(secretB, dropped, a), 10), "a closed realm");
    }
}
