package org.rdmashuffle.mapreduce.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.StringTokenizer;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.compress.CompressionCodec;
import org.apache.hadoop.io.compress.DefaultCodec;
import org.apache.hadoop.mapred.ShuffleHandler;
import org.apache.hadoop.mapreduce.MRJobConfig;
import org.apache.hadoop.mapreduce.TaskCompletionEvent;
import org.apache.hadoop.mapreduce.TaskCounter;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.mapreduce.jobs.ClasspathProbe;
import org.rdmashuffle.mapreduce.jobs.JobResult;
import org.rdmashuffle.mapreduce.jobs.TeraGen;
import org.rdmashuffle.mapreduce.jobs.TeraRows;
import org.rdmashuffle.mapreduce.jobs.TeraSort;
import org.rdmashuffle.mapreduce.jobs.TeraValidate;
import org.rdmashuffle.mapreduce.jobs.WordCount;
import org.rdmashuffle.mapreduce.jobs.WordCountText;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The harness and the test jobs on Hadoop's own shuffle (mapreduce_shuffle only): real MapReduce jobs on a
 * two-NodeManager MiniMRYarnCluster give the right data, and their reducers fetch map outputs from both
 * NodeManagers. Wall times of the cluster start and of every job are logged (target/surefire-reports/*-output.txt).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class MapReduceClusterTest {
    private static final Logger LOG = LoggerFactory.getLogger(MapReduceClusterTest.class);

    private static final long ROWS = 100_000;
    /** TeraGen's maps (and files): four, since every task JVM costs seconds of CPU and TeraGen shuffles nothing. */
    private static final int GEN_MAPS = 4;
    /** TeraSort's and WordCount's maps: eight, which cannot all fit on one NodeManager. */
    private static final int MAPS = 8;
    private static final int SORT_REDUCES = 4;
    private static final long SEED = 0x5EED_2026L;

    private MapReduceCluster cluster;

    @BeforeAll
    @Timeout(300)
    void startCluster() throws IOException {
        cluster = MapReduceCluster.builder("MapReduceClusterTest").start();
    }

    @AfterAll
    void stopCluster() {
        if (cluster != null) {
            cluster.close();
        }
    }

    @Test
    @Timeout(60)
    void shouldRunOnlyHadoopsShuffleHandlerOnEachNodeManagerWhenRdmaServiceIsNotAsked() {
        assertFalse(cluster.rdmaServiceRunning());
        for (int i = 0; i < cluster.nodeManagerCount(); i++) {
            assertEquals(Set.of(ShuffleHandler.MAPREDUCE_SHUFFLE_SERVICEID), cluster.auxServices(i));
            assertTrue(cluster.shufflePort(i) > 0);
            assertFalse(cluster.logDirs(i).isEmpty());
            assertTrue(cluster.localDirs(i).stream().allMatch(File::isDirectory), cluster.localDirs(i).toString());
        }
        assertNotEquals(cluster.shufflePort(0), cluster.shufflePort(1));
    }

    @Test
    @Timeout(900)
    void shouldSortAllRowsIntoTotalOrderWhenTeraSortShufflesCompressedMapOutputs() throws Exception {
        Path dir = new Path(cluster.workDir(), "terasort");
        Path generated = new Path(dir, "generated");
        Path sorted = new Path(dir, "sorted");
        TeraRows.Checksum expected = TeraRows.expected(SEED, ROWS);

        TeraGen.Result gen = TeraGen.run(cluster.jobConf(), generated, ROWS, GEN_MAPS, SEED);
        assertTrue(gen.job().succeeded(), "TeraGen failed");
        assertEquals(GEN_MAPS, gen.job().succeededAttempts(true).size());
        assertEquals(expected, gen.written());
        assertEquals(expected, checksumOfRowFiles(generated));

        Configuration sortConf = cluster.jobConf();
        sortConf.setLong(FileInputFormat.SPLIT_MAXSIZE, ROWS / MAPS * TeraRows.ROW_BYTES); // two maps per file
        sortConf.setBoolean(MRJobConfig.MAP_OUTPUT_COMPRESS, true);
        sortConf.setClass(MRJobConfig.MAP_OUTPUT_COMPRESS_CODEC, DefaultCodec.class, CompressionCodec.class);
        JobResult sort = TeraSort.run(sortConf, generated, sorted, SORT_REDUCES);
        assertTrue(sort.succeeded(), "TeraSort failed");
        assertEquals(MAPS, sort.succeededAttempts(true).size());
        assertEquals(SORT_REDUCES, sort.succeededAttempts(false).size());
        assertEquals(ROWS, sort.counter(TaskCounter.MAP_OUTPUT_RECORDS));
        assertEquals(ROWS, sort.counter(TaskCounter.REDUCE_INPUT_RECORDS));
        assertEquals(ROWS, sort.counter(TaskCounter.REDUCE_OUTPUT_RECORDS));
        assertTrue(sort.counter(TaskCounter.MAP_OUTPUT_MATERIALIZED_BYTES)
                        < sort.counter(TaskCounter.MAP_OUTPUT_BYTES),
                "map outputs were not compressed: " + sort.counters().findCounter(TaskCounter.MAP_OUTPUT_BYTES));
        assertReducersFetchedFromBothNodeManagers(sort);
        assertEquals(Set.of(0, 1), nodeManagersOf(sort.succeededAttempts(false)),
                "four reduces of 1 GiB cannot fit on one NodeManager");

        TeraValidate.Report report = TeraValidate.run(cluster.jobConf(), sorted, new Path(dir, "validated"));
        assertTrue(report.job().succeeded(), "TeraValidate failed");
        assertTrue(report.sorted(), () -> String.join("\n", report.fileLines()));
        assertEquals(SORT_REDUCES, report.files());
        assertEquals(expected, report.checksum());
        for (String file : report.fileLines()) {
            assertFalse(file.contains(" rows=0 "), "a reducer got no rows: " + file);
        }
        LOG.info("TeraGen {} ms, TeraSort {} ms, TeraValidate {} ms; {}", gen.job().elapsedMs(), sort.elapsedMs(),
                report.job().elapsedMs(), report.checksum());
    }

    @Test
    @Timeout(600)
    void shouldCountEveryWordWhenWordCountCombinesOnTheMapSide() throws Exception {
        Path dir = new Path(cluster.workDir(), "wordcount");
        Path text = new Path(dir, "text");
        Configuration conf = cluster.jobConf();
        List<Path> files = WordCountText.write(conf, text, MAPS, 2_000, 3_000, SEED);
        Map<String, Long> expected = countWordsHere(conf, files);

        WordCount.Result count = WordCount.run(conf, text, new Path(dir, "counts"), 3);
        assertTrue(count.job().succeeded(), "WordCount failed");
        assertEquals(expected, count.counts());
        JobResult job = count.job();
        assertEquals(MAPS, job.succeededAttempts(true).size());
        assertTrue(job.counter(TaskCounter.COMBINE_INPUT_RECORDS) > job.counter(TaskCounter.COMBINE_OUTPUT_RECORDS));
        assertEquals(job.counter(TaskCounter.COMBINE_OUTPUT_RECORDS), job.counter(TaskCounter.REDUCE_INPUT_RECORDS));
        assertEquals(expected.values().stream().mapToLong(Long::longValue).sum(),
                job.counter(TaskCounter.MAP_OUTPUT_RECORDS));
        assertReducersFetchedFromBothNodeManagers(job);
    }

    @Test
    @Timeout(300)
    void shouldLoadThisModulesClassesInReduceTasksWhenTheyRunInContainers() throws Exception {
        List<String> classes = new ArrayList<>(mainClassesOfThisModule());
        LOG.info("Main classes of this module the reducers must load: {}", classes.isEmpty()
                ? "none compiled yet" : classes);
        classes.add("org.rdmashuffle.shuffle.core.ShuffleOutputTable");
        classes.add(TeraSort.class.getName());

        int reduces = 1;
        ClasspathProbe.Result probe = ClasspathProbe.run(cluster.jobConf(), new Path(cluster.workDir(), "probe"),
                reduces, classes);
        assertTrue(probe.job().succeeded(), "ClasspathProbe failed");
        assertEquals(new TreeSet<>(classes), probe.foundByClass().keySet());
        probe.foundByClass().forEach((name, found) -> {
            assertEquals(reduces, found.size(), name + ": " + found);
            found.forEach(location -> assertFalse(location.startsWith(ClasspathProbe.MISSING), name + ": " + location));
        });
        LOG.info("Reducers loaded: {}", probe.foundByClass());
    }

    /**
     * Each reducer fetches every map's output (SHUFFLED_MAPS = maps x reduces) from the ShuffleHandler of the
     * NodeManager that map ran on, which the map's completion event names; maps on both NodeManagers therefore mean
     * every reducer fetched from both.
     */
    private void assertReducersFetchedFromBothNodeManagers(JobResult job) {
        List<TaskCompletionEvent> maps = job.succeededAttempts(true);
        int reduces = job.succeededAttempts(false).size();
        assertEquals((long) maps.size() * reduces, job.counter(TaskCounter.SHUFFLED_MAPS));
        assertEquals(0, job.counter(TaskCounter.FAILED_SHUFFLE));
        assertEquals(Set.of(0, 1), nodeManagersOf(maps), "maps served by " + job.mapOutputServers());
        LOG.info("{}: maps per NodeManager {}, reduces per NodeManager {}", job.name(), perNodeManager(maps),
                perNodeManager(job.succeededAttempts(false)));
    }

    private Set<Integer> nodeManagersOf(List<TaskCompletionEvent> attempts) {
        return perNodeManager(attempts).keySet();
    }

    private Map<Integer, Long> perNodeManager(List<TaskCompletionEvent> attempts) {
        return attempts.stream().collect(Collectors.groupingBy(e -> cluster.nodeManagerServing(e.getTaskTrackerHttp())
                .orElseThrow(() -> new AssertionError("no NodeManager serves " + e.getTaskTrackerHttp())),
                TreeMap::new, Collectors.counting()));
    }

    /** Count and checksum of the rows in every part file under {@code dir}, read here without MapReduce. */
    private static TeraRows.Checksum checksumOfRowFiles(Path dir) throws IOException {
        FileSystem fs = FileSystem.getLocal(new Configuration());
        byte[] row = new byte[TeraRows.ROW_BYTES];
        long rows = 0;
        long sum = 0;
        for (FileStatus file : fs.listStatus(dir, p -> p.getName().startsWith("part-"))) {
            assertEquals(0, file.getLen() % TeraRows.ROW_BYTES, file.getPath() + " holds a partial row");
            try (InputStream in = fs.open(file.getPath())) {
                for (long r = file.getLen() / TeraRows.ROW_BYTES; r > 0; r--) {
                    assertEquals(TeraRows.ROW_BYTES, in.readNBytes(row, 0, TeraRows.ROW_BYTES));
                    rows++;
                    sum += TeraRows.hash(row, 0, TeraRows.ROW_BYTES);
                }
            }
        }
        return new TeraRows.Checksum(rows, sum);
    }

    /** The word counts of {@code files}, counted here: whitespace-separated tokens, as the job's mapper splits. */
    private static Map<String, Long> countWordsHere(Configuration conf, List<Path> files) throws IOException {
        Map<String, Long> counts = new TreeMap<>();
        for (Path file : files) {
            FileSystem fs = file.getFileSystem(conf);
            try (InputStream in = fs.open(file)) {
                StringTokenizer words = new StringTokenizer(new String(in.readAllBytes(), StandardCharsets.UTF_8));
                while (words.hasMoreTokens()) {
                    counts.merge(words.nextToken(), 1L, Long::sum);
                }
            }
        }
        return counts;
    }

    /** The top-level classes compiled from this module's src/main (target/classes), by name. */
    private static List<String> mainClassesOfThisModule() throws IOException, URISyntaxException {
        java.nio.file.Path testClasses = java.nio.file.Path.of(
                MapReduceClusterTest.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        java.nio.file.Path classes = testClasses.resolveSibling("classes");
        if (!Files.isDirectory(classes)) {
            return List.of();
        }
        java.nio.file.Path mainClasses = classes.toRealPath();
        try (Stream<java.nio.file.Path> files = Files.walk(mainClasses)) {
            return files.map(p -> mainClasses.relativize(p).toString())
                    .filter(p -> p.endsWith(".class") && !p.contains("$") && !p.endsWith("package-info.class"))
                    .map(p -> p.substring(0, p.length() - ".class".length()).replace(File.separatorChar, '.'))
                    .sorted()
                    .toList();
        }
    }
}
