package org.rdmashuffle.transport.verbs;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Regions whose deregistration failed, kept for good. Such a region may still be registered with the NIC,
 * which could then write into its memory (a READ sink) or serve it (a map output): its memory must not be
 * unmapped, freed, or left to the garbage collector, or the NIC would reach memory reused for something
 * else. Each is held here for the life of the process (not of its node: the registration outlives a closed
 * node too), counted for the process (every node's {@code regionsLeaked}: an executor that replaced its
 * failed node still holds the memory), and logged once per node.
 */
final class KeptRegions {
    private static final Logger LOG = LoggerFactory.getLogger(KeptRegions.class);
    /** Every kept region of the process, with the memory it holds: never released. */
    private static final Set<VerbsRegion> KEPT = ConcurrentHashMap.newKeySet();

    private final AtomicBoolean logged = new AtomicBoolean();

    /** Keeps {@code r} (its memory mapped and reachable) for good; {@code why}: its deregistration's failure. */
    void keep(VerbsRegion r, Exception why, Object node) {
        KEPT.add(r);
        if (logged.compareAndSet(false, true)) {
            LOG.error("verbs node {}: deregistering {} failed ({}); its memory is kept for good (counted in "
                    + "regionsLeaked; later ones are not logged) and the node fails over to the engine's own path",
                    node, r, why.toString());
        } else {
            LOG.debug("verbs node {}: deregistering {} failed; its memory is kept", node, r, why);
        }
    }

    /** Regions kept in this process. */
    static long count() {
        return KEPT.size();
    }
}
