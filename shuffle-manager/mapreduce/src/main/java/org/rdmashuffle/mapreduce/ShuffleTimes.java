package org.rdmashuffle.mapreduce;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import org.apache.hadoop.mapred.Reporter;

/**
 * Where a reduce task's shuffle spends its time, summed over its fetcher threads: opening its node and pool,
 * waiting for REGISTER answers, waiting for READs, handing bytes to the merge manager. Taken once per REGISTER
 * and per block (never per byte); given to the job's counters and to one INFO line when the shuffle ends, so an
 * operator sees where a slow shuffle went without a profiler.
 */
final class ShuffleTimes {
    private final LongAdder openNanos = new LongAdder();
    private final LongAdder registerNanos = new LongAdder();
    private final LongAdder readWaitNanos = new LongAdder();
    private final LongAdder mergeNanos = new LongAdder();

    void opening(long nanos) {
        openNanos.add(nanos);
    }

    void registering(long nanos) {
        registerNanos.add(nanos);
    }

    void waitingForReads(long nanos) {
        readWaitNanos.add(nanos);
    }

    void merging(long nanos) {
        mergeNanos.add(nanos);
    }

    /**
     * Adds every time, in milliseconds, to its counter, and 0 to every other {@link RdmaShuffleCounter}: a counter
     * a task never added to is absent from the job's counters, so one that stayed 0 ({@code MAPS_VIA_HTTP},
     * {@code READ_FAILURES}) would otherwise not be there at all.
     */
    void count(Reporter reporter) {
        for (RdmaShuffleCounter c : RdmaShuffleCounter.values()) {
            reporter.incrCounter(c, 0);
        }
        reporter.incrCounter(RdmaShuffleCounter.OPEN_MILLIS, ms(openNanos));
        reporter.incrCounter(RdmaShuffleCounter.REGISTER_MILLIS, ms(registerNanos));
        reporter.incrCounter(RdmaShuffleCounter.READ_WAIT_MILLIS, ms(readWaitNanos));
        reporter.incrCounter(RdmaShuffleCounter.MERGE_COPY_MILLIS, ms(mergeNanos));
    }

    @Override
    public String toString() {
        return "opening the node and pool " + ms(openNanos) + " ms, waiting for REGISTER answers " + ms(registerNanos)
                + " ms, for READs " + ms(readWaitNanos) + " ms, handing bytes to the merge manager " + ms(mergeNanos)
                + " ms (the last three summed over fetcher threads)";
    }

    private static long ms(LongAdder nanos) {
        return TimeUnit.NANOSECONDS.toMillis(nanos.sum());
    }
}
