package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.compress.CompressionCodec;
import org.apache.hadoop.io.compress.DefaultCodec;
import org.apache.hadoop.mapreduce.Counter;
import org.apache.hadoop.mapreduce.MRConfig;
import org.apache.hadoop.mapreduce.MRJobConfig;
import org.apache.hadoop.mapreduce.TaskCounter;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.util.VersionInfo;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.mapreduce.cluster.MapReduceCluster;
import org.rdmashuffle.mapreduce.jobs.JobResult;
import org.rdmashuffle.mapreduce.jobs.TeraRows;
import org.rdmashuffle.mapreduce.jobs.TeraSort;
import org.rdmashuffle.mapreduce.jobs.WordCount;
import org.rdmashuffle.mapreduce.jobs.WordCountText;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The core set each Hadoop line's module (shuffle-manager/mapreduce-lines) runs on a two-NodeManager
 * MiniMRYarnCluster of its own release, one cluster for both tests: TeraSort over READs gives every row, in total
 * order, every partition READ from both NodeManagers; WordCount over READs gives the counts of the text. Lean on
 * purpose (two jobs, inputs written here): {@link RdmaShuffleJobsTest}, which the Hadoop 3.5 module runs, compares
 * the same jobs byte for byte with Hadoop's own shuffle.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class HadoopLineCoreSetTest {
    private static final Logger LOG = LoggerFactory.getLogger(HadoopLineCoreSetTest.class);
    private static final long ROWS = 100_000;
    private static final int MAPS = 8;
    private static final int REDUCES = 4;
    private static final long SEED = 0x5EED_3A7EL;

    private MapReduceCluster cluster;
    private int port;

    @BeforeAll
    @Timeout(300)
    void startCluster() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        cluster = MapReduceCluster.builder("HadoopLineCoreSetTest").withRdmaService(true)
                .nodeManagerSetting(MapReduceRdmaConf.PORT, Integer.toString(port))
                .nodeManagerSetting(MapReduceRdmaConf.PREFIX + "provider", "tcp")
                .nodeManagerSetting(MapReduceRdmaConf.BIND_HOST, "127.0.0.1")
                .start();
        assertTrue(cluster.rdmaServiceRunning(), "the drop-in mapreduce_shuffle did not start on the NodeManagers");
        LOG.info("Hadoop {}: cluster started in {} ms", VersionInfo.getVersion(), cluster.startMs());
    }

    @AfterAll
    void stopCluster() {
        if (cluster != null) {
            cluster.close();
        }
    }

    @Test
    @Timeout(600)
    void shouldSortEveryRowIntoTotalOrderReadingEveryPartitionFromBothNodeManagersWhenOnThisHadoopLine()
            throws Exception {
        Path dir = new Path(cluster.workDir(), "terasort");
        Path input = new Path(dir, "input");
        TeraRows.writeFiles(input, ROWS, MAPS, SEED);
        Configuration conf = rdmaJob();
        conf.setLong(FileInputFormat.SPLIT_MAXSIZE, ROWS / MAPS * TeraRows.ROW_BYTES);
        conf.setBoolean(MRJobConfig.MAP_OUTPUT_COMPRESS, true);
        conf.setClass(MRJobConfig.MAP_OUTPUT_COMPRESS_CODEC, DefaultCodec.class, CompressionCodec.class);
        JobResult job = TeraSort.run(conf, input, new Path(dir, "sorted"), REDUCES);
        assertTrue(job.succeeded(), "TeraSort over rdma-shuffle failed on Hadoop " + VersionInfo.getVersion());

        // Every row, each once, in key order across the part files in name order: the total-order sort's output.
        assertEquals(TeraRows.expected(SEED, ROWS), RdmaShuffleJobsTest.checkSortedAndSum(new Path(dir, "sorted")));
        int maps = job.succeededAttempts(true).size();
        assertEquals(MAPS, maps);
        assertEquals((long) maps * REDUCES, job.counter(RdmaShuffleCounter.MAPS_READ), "every partition READ");
        assertEquals(0, job.counter(RdmaShuffleCounter.MAPS_VIA_HTTP));
        assertEquals(0, job.counter(RdmaShuffleCounter.READ_FAILURES));
        assertEquals((long) maps * REDUCES, job.counter(TaskCounter.SHUFFLED_MAPS));
        assertEquals(job.counter(TaskCounter.REDUCE_SHUFFLE_BYTES), job.counter(RdmaShuffleCounter.BYTES_READ),
                "the bytes READ are the shuffle's bytes, compressed as stored");
        assertEquals(Set.of(0, 1), nodeManagersOf(job),
                "maps ran on both NodeManagers, so each reducer READ from both");
        LOG.info("Hadoop {}: TeraSort of {} rows over READs in {} ms", VersionInfo.getVersion(), ROWS,
                job.elapsedMs());
    }

    @Test
    @Timeout(600)
    void shouldCountEveryWordReadingEveryPartitionWhenOnThisHadoopLine() throws Exception {
        Path dir = new Path(cluster.workDir(), "wordcount");
        List<Path> files = WordCountText.write(cluster.jobConf(), new Path(dir, "text"), MAPS, 2_000, 3_000, SEED);
        WordCount.Result count = WordCount.run(rdmaJob(), new Path(dir, "text"), new Path(dir, "counts"), 2);
        assertTrue(count.job().succeeded(), "WordCount over rdma-shuffle failed on Hadoop " + VersionInfo.getVersion());

        assertEquals(RdmaShuffleJobsTest.countHere(cluster.jobConf(), files), count.counts());
        JobResult job = count.job();
        int maps = job.succeededAttempts(true).size();
        assertEquals((long) maps * 2, job.counter(RdmaShuffleCounter.MAPS_READ), "every partition READ");
        assertEquals(0, job.counter(RdmaShuffleCounter.MAPS_VIA_HTTP));
        Set<String> present = new TreeSet<>(); // iterated: a look-up by name would create the counter
        for (Counter c : job.counters().getGroup(RdmaShuffleCounter.class.getName())) {
            present.add(c.getName());
        }
        assertEquals(Arrays.stream(RdmaShuffleCounter.values()).map(Enum::name)
                .collect(Collectors.toCollection(TreeSet::new)), present, "every counter present, 0 too");
    }

    /** A job of this cluster using {@link RdmaShuffle}, its reducers looking for the service on {@link #port}. */
    private Configuration rdmaJob() {
        Configuration c = cluster.jobConf();
        c.set(MRConfig.SHUFFLE_CONSUMER_PLUGIN, RdmaShuffle.class.getName());
        c.set(MapReduceRdmaConf.PORT, Integer.toString(port));
        c.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
        return c;
    }

    private Set<Integer> nodeManagersOf(JobResult job) {
        return job.succeededAttempts(true).stream().map(e -> cluster.nodeManagerServing(e.getTaskTrackerHttp())
                .orElseThrow(() -> new AssertionError("no NodeManager serves " + e.getTaskTrackerHttp())))
                .collect(Collectors.toSet());
    }
}
