package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.util.HashMap;
import java.util.Map;
import org.rdmashuffle.transport.Realms;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The protection domain of each realm a verbs node serves, opened on first use (a region registered for the
 * realm, or a queue pair admitted for it) and deallocated when its last user lets go (its regions deregistered
 * and its queue pairs destroyed); a later use opens a fresh one. A queue pair in realm A's domain cannot READ a
 * region of realm B's, whatever rkey it names: the NIC answers with a remote access error.
 *
 * <p>Thread-safe: one monitor, taken per registration, per admitted queue pair and per release, never on the
 * READ path; the domain is allocated and deallocated holding it, so a realm never has two at once.
 */
final class RealmDomains {
    private static final Logger LOG = LoggerFactory.getLogger(VerbsNode.class); // the node's log

    /** The node's device (set once it is open: nothing uses a domain before). */
    private final java.util.function.Supplier<VerbsDevice> verbs;
    private final Map<String, Held> byRealm = new HashMap<>();

    /** One user's hold on a realm's domain: {@link #release} exactly once when done with it. */
    interface Lease {
        VerbsDevice.Domain domain();

        void release();
    }

    private static final class Held {
        final VerbsDevice.Domain domain;
        int users;

        Held(VerbsDevice.Domain domain) {
            this.domain = domain;
        }
    }

    RealmDomains(java.util.function.Supplier<VerbsDevice> verbs) {
        this.verbs = verbs;
    }

    /** A hold on {@code realm}'s domain, opening one when it has none. */
    synchronized Lease acquire(String realm) throws IOException {
        Held h = byRealm.get(realm);
        if (h == null) {
            h = new Held(verbs.get().openDomain());
            byRealm.put(realm, h);
        }
        h.users++;
        Held held = h;
        return new Lease() {
            private boolean released;

            @Override
            public VerbsDevice.Domain domain() {
                return held.domain;
            }

            @Override
            public void release() {
                synchronized (RealmDomains.this) {
                    if (!released) {
                        released = true;
                        letGo(realm, held);
                    }
                }
            }
        };
    }

    private void letGo(String realm, Held h) {
        if (--h.users > 0) {
            return;
        }
        byRealm.remove(realm, h);
        try {
            h.domain.deallocate();
        } catch (IOException | RuntimeException e) {
            LOG.warn("verbs: deallocating the protection domain of realm {} failed ({}); it is kept",
                    Realms.printable(realm), e.getMessage());
        }
    }

    /** Whether {@code realm} has a domain now (tests). */
    synchronized boolean hasDomain(String realm) {
        return byRealm.containsKey(realm);
    }

    /** Realms with a domain now. */
    synchronized int size() {
        return byRealm.size();
    }
}
