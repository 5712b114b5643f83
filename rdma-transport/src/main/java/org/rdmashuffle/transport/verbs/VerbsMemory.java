package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.rdmashuffle.transport.Mappings;
import org.rdmashuffle.transport.Mappings.FileMemory;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A verbs node's registered memory: every region by rkey (what a peer's diagnosis looks up), the bytes
 * registered, and how map output files are registered on this device (a read-only mapping, else a
 * read-write one, else a copy: each step down logged once).
 */
final class VerbsMemory {
    private static final Logger LOG = LoggerFactory.getLogger(VerbsNode.class); // the node's log, as before the split

    private final VerbsNode node;
    private final VerbsDevice verbs;
    /** Whether the device is iWARP, whose READ sinks must be remote-writable. */
    private final boolean iwarp;
    private final Map<Integer, VerbsRegion> regions = new ConcurrentHashMap<>();
    private final AtomicLong registeredBytes = new AtomicLong();
    private volatile FileMemory fileMode = FileMemory.READ_ONLY;
    /** The protection domain of each realm, on a node with realms; else null. */
    private final RealmDomains domains;

    VerbsMemory(VerbsNode node, VerbsDevice verbs, RealmDomains domains) {
        this.node = node;
        this.verbs = verbs;
        this.iwarp = isIwarp(verbs.name());
        this.domains = domains;
    }

    /**
     * Whether {@code device} is an iWARP RNIC ({@code node_type} 4 in sysfs); true when that cannot be
     * read, since a remote-writable sink works on every device while a local-only one fails on iWARP.
     */
    private static boolean isIwarp(String device) {
        try {
            String type = Files.readString(Path.of("/sys/class/infiniband", device, "node_type")).trim();
            return type.startsWith("4");
        } catch (IOException | RuntimeException e) {
            LOG.info("verbs: cannot read the node type of {} ({}); registering READ sinks remote-writable, as "
                    + "iWARP needs", device, e.toString());
            return true;
        }
    }

    /**
     * See {@link VerbsNode#registerFile}: the file at {@code file}, or the one {@code open} is open on (read-only: a
     * read-write mapping of it is replaced by a copy).
     */
    VerbsRegion registerFile(Path file, FileChannel open, String name, long offset, int length, String realm)
            throws IOException {
        for (;;) {
            FileMemory mode = fileMode;
            FileMemory use = open != null && mode == FileMemory.READ_WRITE ? FileMemory.COPY : mode;
            ByteBuffer memory = null;
            try {
                memory = open != null ? Mappings.fileRange(open, name, offset, length, use)
                        : Mappings.fileRange(file, offset, length, use);
                return add(memory, RegionAccess.REMOTE_READ, true, realm);
            } catch (TransportException e) {
                if (memory != null) {
                    Mappings.unmap(memory);
                }
                if (use == FileMemory.COPY || node.isClosed()) {
                    throw e;
                }
                stepDown(mode, e.getMessage());
            } catch (IOException e) {
                if (memory != null) {
                    Mappings.unmap(memory);
                }
                if (use != FileMemory.READ_WRITE) {
                    throw e;
                }
                stepDown(mode, "cannot open " + name + " for a read-write mapping: " + e.getMessage());
            } catch (RuntimeException e) {
                if (memory != null) {
                    Mappings.unmap(memory);
                }
                throw e;
            }
        }
    }

    private synchronized void stepDown(FileMemory from, String why) {
        if (fileMode != from) {
            return;
        }
        fileMode = FileMemory.values()[from.ordinal() + 1];
        LOG.info("verbs: the device did not register a {} ({}); registering map outputs as {} from now on",
                from == FileMemory.READ_ONLY ? "read-only file mapping" : "read-write file mapping", why,
                from == FileMemory.READ_ONLY ? "read-write mappings (never written)" : "copies in registered memory");
    }

    /**
     * Registers {@code memory} for {@code access}; the region unmaps it when closed if {@code ownsMapping}. On a
     * node with realms, memory served to {@code realm} (not null) is registered in that realm's protection
     * domain; everything else (READ sinks, memory of no realm) in the default one, which no accepted queue pair
     * of a node with realms is in.
     */
    VerbsRegion add(ByteBuffer memory, RegionAccess access, boolean ownsMapping, String realm) throws IOException {
        node.ensureOpen();
        RealmDomains.Lease lease = null;
        if (domains != null && realm != null && access == RegionAccess.REMOTE_READ) {
            lease = domains.acquire(realm);
        }
        try {
            return add(memory, access, ownsMapping, realm, lease);
        } catch (IOException | RuntimeException e) {
            if (lease != null) {
                lease.release();
            }
            throw e;
        }
    }

    private VerbsRegion add(ByteBuffer memory, RegionAccess access, boolean ownsMapping, String realm,
                            RealmDomains.Lease lease) throws IOException {
        // Served memory: REMOTE_READ only (a read-only file mapping cannot be registered writable). READ
        // sinks: LOCAL_WRITE, and on iWARP also REMOTE_WRITE, which iWARP requires of the buffer a READ
        // response lands in (RoCE and InfiniBand do not: there a sink cannot be written by any peer).
        int flags = access == RegionAccess.REMOTE_READ ? VerbsDevice.ACCESS_REMOTE_READ
                : iwarp ? VerbsDevice.ACCESS_LOCAL_WRITE | VerbsDevice.ACCESS_REMOTE_WRITE : VerbsDevice.ACCESS_LOCAL_WRITE;
        VerbsDevice.Memory mr = verbs.register(lease == null ? null : lease.domain(), memory, flags);
        VerbsRegion r = new VerbsRegion(node, mr, memory, access, ownsMapping, lease == null ? null : realm,
                lease == null ? null : lease::release);
        regions.put(r.rkey, r);
        registeredBytes.addAndGet(r.length);
        if (node.isClosed()) {
            r.close();
            node.ensureOpen();
        }
        return r;
    }

    void deregistered(VerbsRegion r) {
        regions.remove(r.rkey, r);
        registeredBytes.addAndGet(-r.length);
    }

    /**
     * What a READ of {@code len} bytes at {@code addr} under {@code rkey} gets here, through a queue pair of
     * {@code realm}: on a node with realms, a region of any other realm (or of none) is an unknown key, exactly
     * as an rkey never registered (nothing says it exists).
     */
    int check(int rkey, long addr, int len, String realm) {
        VerbsRegion r = regions.get(rkey);
        if (r == null || (domains != null && (realm == null || !realm.equals(r.realm)))) {
            return ReadStatus.UNKNOWN_KEY;
        }
        return r.check(addr, len);
    }

    int regionCount() {
        return regions.size();
    }

    long registeredBytes() {
        return registeredBytes.get();
    }

    /** Closes every region (the node is closing). */
    void closeAll() {
        for (VerbsRegion r : regions.values().toArray(new VerbsRegion[0])) {
            r.close();
        }
    }
}
