package org.rdmashuffle.shuffle.core.fetch;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What this process's readers fell back for and moved besides block data: blocks handed to the engine's own
 * path and why (logged once per peer), tasks that gave up READs for want of receive memory or pool room
 * (the first of each kind at WARN, the rest at DEBUG), and the fetchers' control bytes and metadata READ
 * again. Counted, not logged, on the task path.
 *
 * <p>Thread-safe: every reduce task of the process reports here, from its task thread.
 */
public final class ReadAccounting {
    private static final Logger LOG = LoggerFactory.getLogger(ReadAccounting.class);

    private final String id;
    private final Set<String> enginePathPeers = ConcurrentHashMap.newKeySet();
    /** Tasks that fetched blocks through the engine's path for want of receive memory. */
    private final LongAdder receiveMemoryFallbacks = new LongAdder();
    private final AtomicBoolean warnedReceiveMemory = new AtomicBoolean();
    /** Tasks that fetched blocks through the engine's path because the pool stayed at its cap. */
    private final LongAdder poolExhaustedFallbacks = new LongAdder();
    private final AtomicBoolean warnedPoolExhausted = new AtomicBoolean();
    private final LongAdder blocksViaEngine = new LongAdder();
    private final LongAdder hostLocalBlocks = new LongAdder();
    private final LongAdder controlBytesRead = new LongAdder();
    private final LongAdder metadataReadsAgain = new LongAdder();
    private final LongAdder buffersWithheld = new LongAdder();

    /** @param id the process's id in log lines (its executor id) */
    public ReadAccounting(String id) {
        this.id = id;
    }

    /**
     * A task could not get receive buffers (allocating or registering memory failed): its blocks not
     * yet READ go through the engine's path. One WARN per process, the rest at DEBUG; counted.
     */
    public void noteReceiveMemoryUnavailable(Exception e) {
        receiveMemoryFallbacks.increment();
        if (warnedReceiveMemory.compareAndSet(false, true)) {
            LOG.warn("this process cannot get memory for receive buffers ({}); the shuffle blocks a task has not "
                    + "READ yet when it meets this are fetched through the engine's own shuffle path. Raise the "
                    + "locked-memory limit (ulimit -l), vm.max_map_count or -XX:MaxDirectMemorySize, or lower "
                    + "{}", e == null ? "no cause" : e.getMessage(), RdmaShuffleConf.POOL_CHUNK_SIZE.name(), e);
        } else {
            LOG.debug("receive buffers unavailable; a task's remaining blocks go through the engine's path", e);
        }
    }

    /**
     * A task's READs were given up because the pool stayed at its cap past {@code pool.acquireTimeout} (other
     * tasks hold its buffers): its blocks not yet READ go through the engine's path. One WARN per process.
     */
    public void notePoolExhausted(Exception e) {
        poolExhaustedFallbacks.increment();
        if (warnedPoolExhausted.compareAndSet(false, true)) {
            LOG.warn("rdma-shuffle: the receive pool stayed at its cap ({}); a task's shuffle blocks not READ yet "
                    + "are fetched through the engine's own shuffle path instead of failing the task. Raise {} or lower {} "
                    + "(later ones are counted in fallback.poolExhaustedTasks)", e.getMessage(),
                    RdmaShuffleConf.POOL_MAX_REGISTERED_BYTES.name(), RdmaShuffleConf.MAX_BYTES_IN_FLIGHT.name());
        } else {
            LOG.debug("receive pool exhausted; a task's remaining blocks go through the engine's path", e);
        }
    }

    /** Counts metadata windows READ again by a task's fetcher because what landed did not make sense. */
    public void addMetadataReadsAgain(long n) {
        if (n > 0) {
            metadataReadsAgain.add(n);
            LOG.info("rdma-shuffle: {} metadata window(s) READ again in process {} because what landed did not make "
                    + "sense (fetch.metadataReadsAgain)", n, id);
        }
    }

    /**
     * Counts receive buffers a task's fetcher kept out of the pool because a post threw after the channel may have
     * accepted some of its READs ({@code BlockFetcher.buffersWithheld}): memory a READ may still write into is
     * never reused, and a buffer whose READs were not all accepted never comes back. Logged at WARN.
     */
    public void addBuffersWithheld(long n) {
        if (n > 0) {
            buffersWithheld.add(n);
            LOG.warn("rdma-shuffle: {} receive buffer(s) of process {} kept out of the pool because posting their READs "
                    + "failed part-way (fetch.buffersWithheld); those whose READs were not all accepted never come "
                    + "back", n, id);
        }
    }

    /**
     * Logs, once per process and {@code peerId}, that blocks of that peer are read through the engine's
     * own path and why; {@code expected} (an operation the application asked for: a peer removed while an
     * external shuffle service serves its files, outputs migrated by decommissioning) logs at INFO instead
     * of WARN.
     */
    public void noteEnginePath(String peerId, String why, boolean expected) {
        if (enginePathPeers.add(peerId)) {
            if (expected) {
                LOG.info("reading shuffle blocks of peer {} through the engine's own shuffle path: {}", peerId, why);
            } else {
                LOG.warn("reading shuffle blocks of peer {} through the engine's own shuffle path: {}", peerId, why);
            }
        } else {
            LOG.debug("reading shuffle blocks of peer {} through the engine's own shuffle path: {}", peerId, why);
        }
    }

    /** As {@link #noteEnginePath(String, String, boolean)}, not expected: at WARN. */
    public void noteEnginePath(String peerId, String why) {
        noteEnginePath(peerId, why, false);
    }

    /** Counts remote blocks a reducer hands to the engine's own path instead of READing them. */
    public void countBlocksViaEngine(long n) {
        blocksViaEngine.add(n);
    }

    /**
     * Counts blocks of other processes on this host that reducers read from those processes' disk (as
     * an engine may, e.g. with a host-local disk read) instead of READing them: not a fallback.
     */
    public void countHostLocalBlocks(long n) {
        hostLocalBlocks.add(n);
    }

    /** Counts bytes fetchers READ from output tables and metadata (not block data). */
    public void addControlBytesRead(long bytes) {
        controlBytesRead.add(bytes);
    }

    public long receiveMemoryFallbacks() {
        return receiveMemoryFallbacks.sum();
    }

    public long poolExhaustedFallbacks() {
        return poolExhaustedFallbacks.sum();
    }

    public long blocksViaEngine() {
        return blocksViaEngine.sum();
    }

    public long hostLocalBlocks() {
        return hostLocalBlocks.sum();
    }

    public long controlBytesRead() {
        return controlBytesRead.sum();
    }

    public long metadataReadsAgain() {
        return metadataReadsAgain.sum();
    }

    public long buffersWithheld() {
        return buffersWithheld.sum();
    }
}
