package org.rdmashuffle.mapreduce.bench;

import java.io.IOException;
import org.apache.hadoop.mapred.RawKeyValueIterator;
import org.apache.hadoop.mapred.ShuffleConsumerPlugin;
import org.apache.hadoop.mapreduce.task.reduce.Shuffle;
import org.apache.hadoop.util.ReflectionUtils;

/**
 * The comparison's plugin: runs the shuffle plugin {@value #PLUGIN} names (Hadoop's {@link Shuffle} by default)
 * and counts the milliseconds of its {@code run} — from the first map completion event asked for to the merged
 * input handed to the reducer — in {@link Timing#SHUFFLE_RUN_MILLIS}. Both shuffles are timed by the same code,
 * and the reducer JVM's start is not in it.
 */
public class TimedShuffle<K, V> implements ShuffleConsumerPlugin<K, V> {
    public static final String PLUGIN = "rdmashuffle.bench.timed.plugin";

    /** The counter this plugin adds to. */
    public enum Timing {
        SHUFFLE_RUN_MILLIS
    }

    private ShuffleConsumerPlugin<K, V> inner;
    private Context<K, V> context;

    @Override
    @SuppressWarnings("unchecked")
    public void init(Context<K, V> context) {
        this.context = context;
        Class<?> c = context.getJobConf().getClass(PLUGIN, Shuffle.class, ShuffleConsumerPlugin.class);
        inner = (ShuffleConsumerPlugin<K, V>) ReflectionUtils.newInstance(c, context.getJobConf());
        inner.init(context);
    }

    @Override
    public RawKeyValueIterator run() throws IOException, InterruptedException {
        long start = System.nanoTime();
        try {
            return inner.run();
        } finally {
            context.getReporter().incrCounter(Timing.SHUFFLE_RUN_MILLIS, (System.nanoTime() - start) / 1_000_000);
        }
    }

    @Override
    public void close() {
        inner.close();
    }
}
