package org.rdmashuffle.mapreduce;

import java.io.File;
import java.io.IOException;
import org.apache.hadoop.mapred.RawKeyValueIterator;

/**
 * {@link RdmaShuffle} whose reducers announce that they started ({@code <gate>.waiting-<reduce>}) and wait for the
 * file {@value #GATE} names before shuffling, so a test can act between the maps' commit and the first READ.
 */
public class GatedRdmaShuffle<K, V> extends RdmaShuffle<K, V> {
    public static final String GATE = "rdmashuffle.test.gate";
    private String gate;
    private String reduce;

    @Override
    public void init(Context<K, V> context) {
        gate = context.getJobConf().get(GATE);
        reduce = context.getReduceId().toString();
        super.init(context);
    }

    @Override
    public RawKeyValueIterator run() throws IOException, InterruptedException {
        if (gate != null) {
            new File(gate + ".waiting-" + reduce).createNewFile();
            long deadline = System.nanoTime() + 300_000_000_000L;
            while (!new File(gate).exists() && System.nanoTime() < deadline) {
                Thread.sleep(100);
            }
        }
        return super.run();
    }
}
