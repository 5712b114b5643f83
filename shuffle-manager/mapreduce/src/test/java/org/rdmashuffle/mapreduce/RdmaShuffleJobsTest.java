package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.compress.CompressionCodec;
import org.apache.hadoop.io.compress.DefaultCodec;
import org.apache.hadoop.mapreduce.MRJobConfig;
import org.apache.hadoop.mapreduce.TaskCompletionEvent;
import org.apache.hadoop.mapreduce.TaskCounter;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.mapreduce.cluster.MapReduceCluster;
import org.rdmashuffle.mapreduce.jobs.JobResult;
import org.rdmashuffle.mapreduce.jobs.TeraGen;
import org.rdmashuffle.mapreduce.jobs.TeraValidate;
import org.rdmashuffle.mapreduce.jobs.TeraRows;
import org.rdmashuffle.mapreduce.jobs.TeraSort;
import org.rdmashuffle.mapreduce.jobs.WordCount;
import org.rdmashuffle.mapreduce.jobs.WordCountText;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * MapReduce jobs on a two-NodeManager MiniMRYarnCluster whose NodeManagers run {@link RdmaShuffleHandler} as
 * {@code mapreduce_shuffle} (the drop-in: Hadoop's HTTP shuffle and READs from one service, each job's token from
 * YARN): the same job (TeraGen → TeraSort → TeraValidate, WordCount) under Hadoop's shuffle (HTTP from the drop-in)
 * and under {@link RdmaShuffle} writes the same bytes, every partition READ from both NodeManagers; a job whose
 * reducers find no RDMA service fetches over HTTP, right, with a WARN per host (asked again later, never given up
 * on); a client with a wrong token is refused while the job runs.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class RdmaShuffleJobsTest {
    private static final Logger LOG = LoggerFactory.getLogger(RdmaShuffleJobsTest.class);
    private static final long ROWS = 100_000;
    private static final int MAPS = 8;
    private static final int REDUCES = 4;
    private static final long SEED = 0x0DDBA11L;
    private static final String DOWN_WARN = "cannot be asked: map outputs of";

    private MapReduceCluster cluster;
    private int port;

    @BeforeAll
    @Timeout(300)
    void startCluster() throws IOException {
        port = freePort();
        cluster = MapReduceCluster.builder("RdmaShuffleJobsTest").withRdmaService(true)
                .nodeManagerSetting(MapReduceRdmaConf.PORT, Integer.toString(port))
                .nodeManagerSetting(MapReduceRdmaConf.PREFIX + "provider", "tcp")
                .nodeManagerSetting(MapReduceRdmaConf.BIND_HOST, "127.0.0.1")
                .start();
        assertTrue(cluster.rdmaServiceRunning(), "the drop-in did not start on the NodeManagers");
        for (int i = 0; i < cluster.nodeManagerCount(); i++) {
            assertEquals(Set.of("mapreduce_shuffle"), cluster.auxServices(i), "the drop-in alone, as mapreduce_shuffle");
            assertTrue(cluster.shufflePort(i) > 0, "its metadata is ShuffleHandler's: the HTTP port");
        }
    }

    @AfterAll
    void stopCluster() {
        if (cluster != null) {
            cluster.close();
        }
    }


    /** Checks the part files under {@code dir}, in name order, hold rows in key order; their count and checksum. */
    static TeraRows.Checksum checkSortedAndSum(Path dir) throws IOException {
        FileSystem fs = FileSystem.getLocal(new Configuration());
        FileStatus[] parts = fs.listStatus(dir, p -> p.getName().startsWith("part-"));
        Arrays.sort(parts, (x, y) -> x.getPath().getName().compareTo(y.getPath().getName()));
        byte[] row = new byte[TeraRows.ROW_BYTES];
        byte[] previous = null;
        long rows = 0;
        long sum = 0;
        for (FileStatus part : parts) {
            assertEquals(0, part.getLen() % TeraRows.ROW_BYTES, part.getPath() + " holds a partial row");
            try (var in = fs.open(part.getPath())) {
                for (long r = part.getLen() / TeraRows.ROW_BYTES; r > 0; r--) {
                    in.readFully(row);
                    if (previous != null) {
                        assertTrue(TeraRows.compareKeys(previous, TeraRows.KEY_BYTES, row, TeraRows.KEY_BYTES) <= 0,
                                "row " + rows + " is out of order in " + part.getPath());
                    } else {
                        previous = new byte[TeraRows.KEY_BYTES];
                    }
                    System.arraycopy(row, 0, previous, 0, TeraRows.KEY_BYTES);
                    rows++;
                    sum += TeraRows.hash(row, 0, TeraRows.ROW_BYTES);
                }
            }
        }
        return new TeraRows.Checksum(rows, sum);
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    /** A job configuration using {@link RdmaShuffle} whose reducers look for the service on {@code servicePort}. */
    private Configuration rdmaJob(int servicePort) {
        Configuration c = cluster.jobConf();
        c.set(org.apache.hadoop.mapreduce.MRConfig.SHUFFLE_CONSUMER_PLUGIN, RdmaShuffle.class.getName());
        c.set(MapReduceRdmaConf.PORT, Integer.toString(servicePort));
        c.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
        return c;
    }

    private static Configuration sortSettings(Configuration c) {
        c.setLong(FileInputFormat.SPLIT_MAXSIZE, ROWS / MAPS * TeraRows.ROW_BYTES);
        c.setBoolean(MRJobConfig.MAP_OUTPUT_COMPRESS, true);
        c.setClass(MRJobConfig.MAP_OUTPUT_COMPRESS_CODEC, DefaultCodec.class, CompressionCodec.class);
        return c;
    }

    @Test
    @Timeout(900)
    void shouldSortCompressedMapOutputsToTheBytesHadoopsShuffleGivesReadingEveryPartitionFromBothNodeManagers()
            throws Exception {
        Path dir = new Path(cluster.workDir(), "terasort");
        Path generated = new Path(dir, "generated");
        TeraGen.Result gen = TeraGen.run(cluster.jobConf(), generated, ROWS, MAPS, SEED);
        assertTrue(gen.job().succeeded(), "TeraGen failed");
        assertEquals(TeraRows.expected(SEED, ROWS), gen.written());
        JobResult http = TeraSort.run(sortSettings(cluster.jobConf()), generated, new Path(dir, "by-http"), REDUCES);
        assertTrue(http.succeeded(), "TeraSort over Hadoop's shuffle failed");
        JobResult rdma = TeraSort.run(sortSettings(rdmaJob(port)), generated, new Path(dir, "by-rdma"), REDUCES);
        assertTrue(rdma.succeeded(), "TeraSort over rdma-shuffle failed");

        assertEquals(List.of(), differingParts(new Path(dir, "by-http"), new Path(dir, "by-rdma"), REDUCES));
        int maps = rdma.succeededAttempts(true).size();
        assertEquals(MAPS, maps);
        assertEquals((long) maps * REDUCES, rdma.counter(RdmaShuffleCounter.MAPS_READ), "every partition READ");
        assertEquals(0, rdma.counter(RdmaShuffleCounter.MAPS_VIA_HTTP));
        assertEquals(0, rdma.counter(RdmaShuffleCounter.READ_FAILURES));
        assertEquals((long) maps * REDUCES, rdma.counter(TaskCounter.SHUFFLED_MAPS));
        assertEquals(0, rdma.counter(TaskCounter.FAILED_SHUFFLE));
        assertEquals(rdma.counter(TaskCounter.REDUCE_SHUFFLE_BYTES), rdma.counter(RdmaShuffleCounter.BYTES_READ),
                "the bytes READ are the shuffle's bytes, compressed as stored");
        assertTrue(rdma.counter(TaskCounter.MAP_OUTPUT_MATERIALIZED_BYTES) < rdma.counter(TaskCounter.MAP_OUTPUT_BYTES),
                "map outputs were not compressed");
        assertEquals(Set.of(0, 1), nodeManagersOf(rdma.succeededAttempts(true)),
                "maps ran on both NodeManagers, so each reducer READ from both");

        assertEquals(TeraRows.expected(SEED, ROWS), checkSortedAndSum(new Path(dir, "by-rdma")));
        // TeraValidate, a job with a shuffle of its own (every part file's summary to one reducer), over READs.
        TeraValidate.Report report = TeraValidate.run(rdmaJob(port), new Path(dir, "by-rdma"),
                new Path(dir, "validated"));
        assertTrue(report.job().succeeded(), "TeraValidate failed");
        assertTrue(report.sorted(), "TeraValidate: " + report.fileLines());
        assertEquals(TeraRows.expected(SEED, ROWS), report.checksum());
        assertEquals(report.job().succeededAttempts(true).size(), report.job().counter(RdmaShuffleCounter.MAPS_READ),
                "TeraValidate's reducer READ every summary");
        LOG.info("TeraSort {} rows: Hadoop's shuffle {} ms, rdma-shuffle {} ms (shuffle {} ms summed over reducers)",
                ROWS, http.elapsedMs(), rdma.elapsedMs(), rdma.counter(RdmaShuffleCounter.SHUFFLE_MILLIS));
    }

    @Test
    @Timeout(600)
    void shouldCountWordsToTheBytesHadoopsShuffleGivesReadingFromBothNodeManagers() throws Exception {
        Path dir = new Path(cluster.workDir(), "wordcount");
        Path text = new Path(dir, "text");
        List<Path> files = WordCountText.write(cluster.jobConf(), text, MAPS, 2_000, 3_000, SEED + 1);
        WordCount.Result http = WordCount.run(cluster.jobConf(), text, new Path(dir, "by-http"), 2);
        assertTrue(http.job().succeeded(), "WordCount over Hadoop's shuffle failed");
        WordCount.Result rdma = WordCount.run(rdmaJob(port), text, new Path(dir, "by-rdma"), 2);
        assertTrue(rdma.job().succeeded(), "WordCount over rdma-shuffle failed");
        assertEquals(List.of(), differingParts(new Path(dir, "by-http"), new Path(dir, "by-rdma"), 2));
        assertEquals(countHere(cluster.jobConf(), files), rdma.counts());
        JobResult job = rdma.job();
        int maps = job.succeededAttempts(true).size();
        assertEquals((long) maps * 2, job.counter(RdmaShuffleCounter.MAPS_READ), "every partition READ");
        assertEquals(0, job.counter(RdmaShuffleCounter.MAPS_VIA_HTTP));
        Set<String> present = new java.util.TreeSet<>(); // iterated: a look-up by name would create the counter
        for (org.apache.hadoop.mapreduce.Counter c : job.counters().getGroup(RdmaShuffleCounter.class.getName())) {
            present.add(c.getName());
        }
        assertEquals(new java.util.TreeSet<>(java.util.Arrays.stream(RdmaShuffleCounter.values()).map(Enum::name)
                .toList()), present, "every counter in the job's counters, those that stayed 0 too");
        assertEquals(Set.of(0, 1), nodeManagersOf(job.succeededAttempts(true)),
                "maps ran on both NodeManagers, so each reducer READ from both");
    }

    @Test
    @Timeout(600)
    void shouldFetchOverHttpWithAWarnPerHostWhenReducersFindNoServiceAndCountRight() throws Exception {
        Path dir = new Path(cluster.workDir(), "no-service");
        Configuration conf = rdmaJob(freePort()); // nobody listens there: as a cluster without the service
        // Each later turn of a host asks again: no retries within a turn, or each would wait connectRetryWait thrice.
        conf.set(MapReduceRdmaConf.PREFIX + "connectRetries", "0");
        List<Path> files = WordCountText.write(conf, new Path(dir, "text"), MAPS, 2_000, 3_000, SEED);
        WordCount.Result count = WordCount.run(conf, new Path(dir, "text"), new Path(dir, "counts"), 2);
        assertTrue(count.job().succeeded(), "WordCount failed");
        assertEquals(countHere(conf, files), count.counts());
        JobResult job = count.job();
        int maps = job.succeededAttempts(true).size();
        assertEquals(0, job.counter(RdmaShuffleCounter.MAPS_READ));
        assertEquals((long) maps * 2, job.counter(TaskCounter.SHUFFLED_MAPS));
        // No service is not given up on (it may be restarting): each reducer asks each host again at its later
        // turns, after a wait; the WARN is said once per host per reducer while the trouble stays the same.
        long hosts = nodeManagersOf(job.succeededAttempts(true)).size();
        assertEquals(0, job.counter(RdmaShuffleCounter.HOSTS_VIA_HTTP), "no host sent to HTTP for good");
        assertTrue(job.counter(RdmaShuffleCounter.SERVICE_UNREACHABLE) >= 2L * hosts,
                "each reducer found each host's service down at least once");
        long warns = logLines(job.jobId().toString().replace("job_", "application_"), DOWN_WARN);
        assertEquals(2L * hosts, warns, "one WARN per host per reducer in the containers' logs");
    }

    @Test
    @Timeout(600)
    void shouldRefuseClientsWithoutTheRunningJobsTokenAndRerunAMapWhoseOutputWasDeletedAfterItCommitted()
            throws Exception {
        Path dir = new Path(cluster.workDir(), "deleted");
        Path input = new Path(dir, "input");
        TeraRows.writeFiles(input, ROWS, MAPS, SEED);
        java.io.File gate = new java.io.File(cluster.clusterDir(), "deleted-gate");
        Configuration conf = sortSettings(rdmaJob(port));
        conf.set(org.apache.hadoop.mapreduce.MRConfig.SHUFFLE_CONSUMER_PLUGIN, GatedRdmaShuffle.class.getName());
        conf.set(GatedRdmaShuffle.GATE, gate.getPath());
        conf.setLong(MRJobConfig.MAX_SHUFFLE_FETCH_RETRY_DELAY, 1000); // Hadoop's penalty between retries of a host
        java.util.concurrent.ExecutorService submit = java.util.concurrent.Executors.newSingleThreadExecutor();
        try {
            java.util.concurrent.Future<JobResult> running = submit.submit(
                    () -> TeraSort.run(conf, input, new Path(dir, "sorted"), REDUCES));
            // Reducers start once every map committed (slowstart 1.0); they wait at the gate.
            long deadline = System.nanoTime() + 240_000_000_000L;
            java.io.File[] waiting;
            do {
                Thread.sleep(100);
                waiting = gate.getParentFile().listFiles((d, n) -> n.startsWith(gate.getName() + ".waiting-"));
            } while ((waiting == null || waiting.length == 0) && System.nanoTime() < deadline && !running.isDone());
            assertTrue(waiting != null && waiting.length > 0, "no reducer reached the gate");
            // attempt_<cluster>_<job>_r_<task>_<attempt>: this job's application holds the map outputs
            String[] id = waiting[0].getName().substring(waiting[0].getName().indexOf("attempt_")).split("_");
            String ownOutput = "/appcache/application_" + id[1] + "_" + id[2] + "/output/attempt_" + id[1] + "_" + id[2]
                    + "_m_000000_0/file.out";
            // While the job runs, its maps committed and the service knows it: a client with a guessed token, one
            // naming another job, and a flood of them get no byte and a clear error, and do not stop the job.
            String jobId = "job_" + id[1] + "_" + id[2];
            assertRefused(jobId, "a-guessed-job-token".getBytes(StandardCharsets.UTF_8), "auth");
            assertRefused("job_" + id[1] + "_9999", "some-other-token".getBytes(StandardCharsets.UTF_8), "realm");
            for (int i = 0; i < 20; i++) {
                assertRefused(jobId, ("flood-" + i).getBytes(StandardCharsets.UTF_8), "auth");
            }
            List<java.io.File> deleted = new java.util.ArrayList<>();
            for (int i = 0; i < cluster.nodeManagerCount(); i++) {
                for (java.io.File local : cluster.localDirs(i)) {
                    try (Stream<java.nio.file.Path> files = Files.walk(local.toPath())) {
                        for (java.nio.file.Path f : files.filter(p -> p.toString().endsWith(ownOutput))
                                .toList()) {
                            Files.delete(f);
                            deleted.add(f.toFile());
                        }
                    }
                }
            }
            assertEquals(1, deleted.size(), "map 0's committed output: " + deleted);
            assertTrue(gate.createNewFile());
            JobResult job = running.get(540, java.util.concurrent.TimeUnit.SECONDS);
            assertTrue(job.succeeded(), "TeraSort failed");
            assertEquals(TeraRows.expected(SEED, ROWS), checkSortedAndSum(new Path(dir, "sorted")));
            // Reported by the reducers that asked for it (a reducer whose shuffle then stalls too long on the rerun
            // is replaced by Hadoop's health check, and a failed attempt's counters do not count: its log does).
            String missing = "fetching attempt_" + id[1] + "_" + id[2] + "_m_000000_0 from ";
            assertTrue(logLines("application_" + id[1] + "_" + id[2], missing) > 0,
                    "no reducer reported the missing output as a fetch failure");
            assertTrue(job.counter(RdmaShuffleCounter.MAPS_READ) > 0, "the refused clients did not stop the READs");
            long map0Attempts = job.completionEvents().stream()
                    .filter(e -> e.getTaskAttemptId().getTaskID().getId() == 0 && e.getTaskAttemptId().getTaskID()
                            .getTaskType() == org.apache.hadoop.mapreduce.TaskType.MAP)
                    .map(e -> e.getTaskAttemptId().getId()).distinct().count();
            assertTrue(map0Attempts >= 2, "map 0 was rerun: " + job.completionEvents());
        } finally {
            submit.shutdownNow();
        }
    }

    /**
     * A client proving {@code token} for {@code job}'s realm asks the service to register map 1 for reduce 0: it is
     * refused before any byte with an error naming {@code why}.
     */
    private void assertRefused(String job, byte[] token, String why) throws IOException {
        try (ReducerClient client = new ReducerClient(MapReduceRdmaConf.from(rdmaJob(port)), job, token)) {
            var service = new org.rdmashuffle.transport.NodeAddress("127.0.0.1", port, "tcp");
            IOException e = org.junit.jupiter.api.Assertions.assertThrows(IOException.class, () -> client.call(service,
                    RegisterProtocol.encode(new RegisterProtocol.Request(MAPS, REDUCES, 0,
                            new RegisterProtocol.MapAttempt[] {new RegisterProtocol.MapAttempt(1, 0)}))));
            assertTrue(e.getMessage().toLowerCase(java.util.Locale.ROOT).contains(why),
                    "the error says why (" + why + "): " + e.getMessage());
        }
    }

    /** Lines containing {@code text} in every container log of the application. */
    private long logLines(String app, String text) throws IOException {
        long n = 0;
        for (int i = 0; i < cluster.nodeManagerCount(); i++) {
            for (File logDir : cluster.logDirs(i)) {
                File appDir = new File(logDir, app);
                if (!appDir.isDirectory()) {
                    continue;
                }
                try (Stream<java.nio.file.Path> logs = Files.walk(appDir.toPath())) {
                    for (java.nio.file.Path log : logs.filter(Files::isRegularFile).toList()) {
                        n += Files.readAllLines(log, StandardCharsets.UTF_8).stream()
                                .filter(l -> l.contains(text)).count();
                    }
                }
            }
        }
        return n;
    }

    static Map<String, Long> countHere(Configuration conf, List<Path> files) throws IOException {
        FileSystem fs = FileSystem.getLocal(conf);
        Map<String, Long> counts = new TreeMap<>();
        for (Path f : files) {
            try (var in = fs.open(f)) {
                for (String w : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\\s+")) {
                    if (!w.isEmpty()) {
                        counts.merge(w, 1L, Long::sum);
                    }
                }
            }
        }
        return counts;
    }

    /** The part files whose bytes differ between {@code a} and {@code b} (or exist in one only). */
    private static List<String> differingParts(Path a, Path b, int parts) throws IOException {
        FileSystem fs = FileSystem.getLocal(new Configuration());
        FileStatus[] as = fs.listStatus(a, p -> p.getName().startsWith("part-"));
        FileStatus[] bs = fs.listStatus(b, p -> p.getName().startsWith("part-"));
        assertEquals(parts, as.length);
        assertArrayEquals(Arrays.stream(as).map(s -> s.getPath().getName()).sorted().toArray(),
                Arrays.stream(bs).map(s -> s.getPath().getName()).sorted().toArray());
        return Arrays.stream(as).map(s -> s.getPath().getName()).filter(name -> {
            try (var x = fs.open(new Path(a, name)); var y = fs.open(new Path(b, name))) {
                return !Arrays.equals(x.readAllBytes(), y.readAllBytes());
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }).collect(Collectors.toList());
    }

    private Set<Integer> nodeManagersOf(List<TaskCompletionEvent> attempts) {
        return attempts.stream().map(e -> cluster.nodeManagerServing(e.getTaskTrackerHttp())
                .orElseThrow(() -> new AssertionError("no NodeManager serves " + e.getTaskTrackerHttp())))
                .collect(Collectors.toSet());
    }
}
