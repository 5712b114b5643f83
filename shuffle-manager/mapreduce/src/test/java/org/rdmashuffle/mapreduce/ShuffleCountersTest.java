package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;
import java.util.TreeMap;
import org.apache.hadoop.mapred.Counters;
import org.apache.hadoop.mapred.InputSplit;
import org.apache.hadoop.mapred.Reporter;
import org.junit.jupiter.api.Test;

/**
 * Every {@link RdmaShuffleCounter} is in the task's counters when its shuffle ends, those that stayed 0 too
 * (a counter Hadoop never saw is absent from the job's counters, and absent is not obviously 0).
 */
class ShuffleCountersTest {
    /** A task's reporter as Hadoop's {@code Task.TaskReporter} is: counters added to a {@link Counters}. */
    private static final class CountingReporter implements Reporter {
        final Counters counters = new Counters();

        @Override
        public void setStatus(String status) {
        }

        @Override
        public Counters.Counter getCounter(Enum<?> name) {
            return counters.findCounter(name);
        }

        @Override
        public Counters.Counter getCounter(String group, String name) {
            return counters.findCounter(group, name);
        }

        @Override
        public void incrCounter(Enum<?> key, long amount) {
            counters.incrCounter(key, amount);
        }

        @Override
        public void incrCounter(String group, String counter, long amount) {
            counters.incrCounter(group, counter, amount);
        }

        @Override
        public InputSplit getInputSplit() {
            throw new UnsupportedOperationException();
        }

        @Override
        public float getProgress() {
            return 0;
        }

        @Override
        public void progress() {
        }
    }

    @Test
    void shouldReportEveryCounterWhenTheShuffleEndsWithNothingRead() {
        CountingReporter reporter = new CountingReporter();
        new ShuffleTimes().count(reporter);
        // Iterated, not looked up: a look-up by name would create the counter it looks for.
        Map<String, Long> present = new TreeMap<>();
        for (Counters.Group group : reporter.counters) {
            if (group.getName().equals(RdmaShuffleCounter.class.getName())) {
                for (Counters.Counter c : group) {
                    present.put(c.getName(), c.getValue());
                }
            }
        }
        Map<String, Long> expected = new TreeMap<>();
        for (RdmaShuffleCounter c : RdmaShuffleCounter.values()) {
            expected.put(c.name(), 0L);
        }
        assertEquals(expected, present);
    }

    @Test
    void shouldKeepWhatWasCountedWhenTheZeroCountersAreAdded() {
        CountingReporter reporter = new CountingReporter();
        reporter.incrCounter(RdmaShuffleCounter.MAPS_READ, 7);
        new ShuffleTimes().count(reporter);
        assertEquals(7, reporter.counters.findCounter(RdmaShuffleCounter.MAPS_READ).getValue());
        assertEquals(0, reporter.counters.findCounter(RdmaShuffleCounter.READ_FAILURES).getValue());
    }
}
