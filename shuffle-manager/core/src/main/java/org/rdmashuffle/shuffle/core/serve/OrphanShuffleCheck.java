package org.rdmashuffle.shuffle.core.serve;

import java.util.Arrays;
import java.util.TreeSet;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Consumer;
import java.util.function.IntConsumer;
import java.util.function.IntPredicate;
import org.rdmashuffle.shuffle.core.directory.PeerDirectory;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Asks the directory about every shuffle held here and drops those the engine no longer knows. An engine
 * may tell a process once that it cleaned a shuffle (Spark does); a process that missed it (on Spark, an
 * executor whose block manager the driver had removed at that moment, until it registered again) would keep
 * that shuffle's outputs registered and its files on disk until it exits.
 *
 * <p>Runs on the owner's maintenance thread ({@link MapOutputServer#scheduleMaintenance}); never throws.
 */
public final class OrphanShuffleCheck implements Runnable {
    private static final Logger LOG = LoggerFactory.getLogger(OrphanShuffleCheck.class);

    private final String id;
    private final PeerDirectory directory;
    private final Consumer<java.util.Collection<Integer>> held;
    private final IntPredicate unregisteredHere;
    private final IntConsumer dropShuffle;
    /** Shuffles dropped because the engine no longer knew them (their cleanup message did not arrive here). */
    private final LongAdder dropped = new LongAdder();

    /**
     * @param id this process's id in log lines
     * @param held adds every shuffle held here to the collection it is given
     * @param unregisteredHere whether a shuffle's cleanup did arrive here (it goes quietly)
     * @param dropShuffle drops a shuffle as the engine's cleanup would have (files included)
     */
    public OrphanShuffleCheck(String id, PeerDirectory directory, Consumer<java.util.Collection<Integer>> held,
                              IntPredicate unregisteredHere, IntConsumer dropShuffle) {
        this.id = id;
        this.directory = directory;
        this.held = held;
        this.unregisteredHere = unregisteredHere;
        this.dropShuffle = dropShuffle;
    }

    /** Every shuffle held here, sorted. */
    public int[] heldShuffles() {
        TreeSet<Integer> ids = new TreeSet<>();
        held.accept(ids);
        return ids.stream().mapToInt(Integer::intValue).toArray();
    }

    @Override
    public void run() {
        try {
            int[] ids = heldShuffles();
            if (ids.length == 0) {
                return;
            }
            int[] gone;
            try {
                gone = directory.goneShuffles(ids);
            } catch (Exception e) { // RpcTimeoutException is checked; the next check asks again
                LOG.debug("cannot ask the driver which of the {} shuffles held here it cleaned", ids.length, e);
                return;
            }
            for (int shuffleId : gone) {
                if (Arrays.binarySearch(ids, shuffleId) < 0) {
                    continue; // ids is sorted; only what was asked about is dropped
                }
                // One whose cleanup did arrive (a late reader cached its metadata again) goes quietly.
                boolean missed = !unregisteredHere.test(shuffleId);
                try {
                    dropShuffle.accept(shuffleId);
                } catch (RuntimeException e) {
                    LOG.warn("rdma-shuffle: executor {} cannot drop shuffle {}, which the driver cleaned", id,
                            shuffleId, e);
                    continue;
                }
                if (missed) {
                    dropped.increment();
                    LOG.info("rdma-shuffle: the driver no longer knows shuffle {} (its cleanup did not reach executor "
                            + "{}); dropped its registrations, cached metadata and files here", shuffleId, id);
                }
            }
        } catch (RuntimeException e) { // a scheduled task that throws is never run again
            LOG.warn("rdma-shuffle: checking executor {}'s shuffles against the driver failed", id, e);
        }
    }

    /** Shuffles dropped because the engine no longer knew them. */
    public long dropped() {
        return dropped.sum();
    }
}
