package org.rdmashuffle.mapreduce;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import org.apache.hadoop.mapred.RawKeyValueIterator;
import org.apache.hadoop.mapreduce.MRConfig;

/**
 * {@link RdmaShuffle} whose reduce attempts a test steps through, by files in the directory {@value #STAGE} names
 * (shared by the test and the task JVMs: one machine):
 * <ol>
 * <li>{@code waiting-<attempt>}: the attempt started; it holds the attempt's local directories
 * ({@code mapreduce.cluster.local.dir}, one a line), where its merge writes under {@code output/<attempt>}. The
 * attempt waits for {@code go-<attempt>} (or {@code open}) before it shuffles.</li>
 * <li>{@code shuffled-<attempt>}: it shuffled and merged; it holds the attempt's {@link RdmaShuffleCounter}s
 * ({@code NAME=value}, one a line). The attempt waits for {@code done-<attempt>} (or {@code open}) before it
 * reduces.</li>
 * </ol>
 * With {@code open} present an attempt waits for nothing. Each wait gives up after five minutes.
 */
public class StagedRdmaShuffle<K, V> extends RdmaShuffle<K, V> {
    public static final String STAGE = "rdmashuffle.test.stage";
    private static final long WAIT_NANOS = 300_000_000_000L;

    private File stage;
    private String attempt;
    private String localDirs;
    private Context<K, V> context;

    @Override
    public void init(Context<K, V> context) {
        this.context = context;
        String dir = context.getJobConf().get(STAGE);
        stage = dir == null ? null : new File(dir);
        attempt = context.getReduceId().toString();
        localDirs = String.join("\n", context.getJobConf().getTrimmedStrings(MRConfig.LOCAL_DIR));
        super.init(context);
    }

    @Override
    public RawKeyValueIterator run() throws IOException, InterruptedException {
        if (stage == null) {
            return super.run();
        }
        announce("waiting-" + attempt, localDirs);
        await("go-" + attempt);
        RawKeyValueIterator merged = super.run();
        StringBuilder counters = new StringBuilder();
        for (RdmaShuffleCounter c : RdmaShuffleCounter.values()) {
            counters.append(c.name()).append('=').append(context.getReporter().getCounter(c).getValue()).append('\n');
        }
        announce("shuffled-" + attempt, counters.toString());
        await("done-" + attempt);
        return merged;
    }

    /** Writes {@code name} whole (a temporary file renamed), so a test never reads it half written. */
    private void announce(String name, String text) throws IOException {
        File tmp = new File(stage, "." + name + ".tmp");
        Files.writeString(tmp.toPath(), text, StandardCharsets.UTF_8);
        Files.move(tmp.toPath(), new File(stage, name).toPath(), StandardCopyOption.ATOMIC_MOVE);
    }

    private void await(String name) throws InterruptedException {
        long deadline = System.nanoTime() + WAIT_NANOS;
        while (!new File(stage, name).exists() && !new File(stage, "open").exists() && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
    }
}
