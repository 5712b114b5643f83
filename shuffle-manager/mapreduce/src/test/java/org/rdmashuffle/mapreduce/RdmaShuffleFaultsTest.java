package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.JobCounter;
import org.apache.hadoop.mapreduce.MRConfig;
import org.apache.hadoop.mapreduce.MRJobConfig;
import org.apache.hadoop.mapreduce.TaskCompletionEvent;
import org.apache.hadoop.mapreduce.TaskCounter;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.mapreduce.cluster.MapReduceCluster;
import org.rdmashuffle.mapreduce.jobs.JobResult;
import org.rdmashuffle.mapreduce.jobs.TeraRows;
import org.rdmashuffle.mapreduce.jobs.TeraSort;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Faults while a job runs, on a two-NodeManager MiniMRYarnCluster whose NodeManagers run the drop-in as
 * {@code mapreduce_shuffle} with a recovery path (as NodeManager recovery gives one:
 * {@link MapReduceCluster.Builder#withAuxServiceRecovery}); the reduce attempts are stepped through with
 * {@link StagedRdmaShuffle}:
 * <ul>
 * <li>{@code mapreduce_shuffle} is restarted on every NodeManager (stopped on both, then started, through
 * {@code AuxServices.reload} as an operator's {@code PUT /ws/v1/node/auxiliaryservices} does), each time on the
 * HTTP port it had (the one the ApplicationMaster told the reducers), twice in one job of two waves of reducers.
 * Restart 1, the first wave waiting to shuffle: the READ sides' kept jobs are deleted meanwhile (as without recovery
 * for them), so the restarted services refuse the unknown job and the first wave fetches over HTTP from Hadoop's
 * side (its token recovered, its port kept) without sending a host to HTTP for good. The second wave's containers
 * teach the services the job again. Restart 2, the second wave waiting, every container of the job started: the
 * services know the job from their recovery paths alone, and the second wave READs every map output. The job writes
 * the right bytes, no map is blamed or rerun, and each NodeManager forgets the job when it stops. Not shown here:
 * one reducer meeting a service down and READing from it again later in its own shuffle (a reducer's turns of a
 * host are too few to stage in a cluster: {@link ReducerServiceRestartTest} shows it with real sockets), a reducer
 * shuffling while HTTP is down too (Hadoop's fetcher would count refused connections against the maps), and a
 * restart of the NodeManager process itself (NodeManager recovery cannot run in a MiniYARNCluster of two
 * NodeManagers: it refuses their ephemeral ports and would share one state store). Both NodeManagers share one
 * READ node in this process, so the job's kept entries are deleted on both, never on one.</li>
 * <li>a reducer's merge writes into a tmpfs of 64 KiB mounted on its attempt's output directory: that attempt
 * fails with the disk full, the job reruns the reduce (another attempt, another directory), writes the right
 * bytes, and no map is blamed or rerun.</li>
 * </ul>
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class RdmaShuffleFaultsTest {
    private static final Logger LOG = LoggerFactory.getLogger(RdmaShuffleFaultsTest.class);
    private static final long SEED = 0x5EEDFA17L;
    private static final long JOB_SECONDS = 300;

    private MapReduceCluster cluster;
    private int port;
    /** tmpfs mounted by a test and not yet unmounted: {@link #stopCluster} unmounts what a failure left. */
    private final List<File> mounts = new ArrayList<>();

    @BeforeAll
    @Timeout(300)
    void startCluster() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        cluster = MapReduceCluster.builder("mrt-faults").withRdmaService(true).withAuxServiceRecovery(true)
                .nodeManagerSetting(MapReduceRdmaConf.PORT, Integer.toString(port))
                .nodeManagerSetting(MapReduceRdmaConf.PREFIX + "provider", "tcp")
                .nodeManagerSetting(MapReduceRdmaConf.BIND_HOST, "127.0.0.1")
                .start();
        assertTrue(cluster.rdmaServiceRunning(), "rdma_shuffle did not start on the NodeManagers");
    }

    @AfterAll
    void stopCluster() {
        try {
            for (File m : new ArrayList<>(mounts)) {
                unmount(m);
            }
        } finally {
            if (cluster != null) {
                cluster.close();
            }
        }
    }

    @Test
    @Timeout(420)
    void shouldReadMapOutputsAgainWhenMapreduceShuffleRestartsWithAJobRunning() throws Exception {
        final long rows = 8_000;
        final int maps = 2;
        final int reduces = 4;
        Path dir = new Path(cluster.workDir(), "restart");
        TeraRows.writeFiles(new Path(dir, "input"), rows, maps, SEED);
        File stage = stageDir("restart");
        Configuration conf = stagedJob(stage, rows, maps);
        // Maps of 2048 MB: one per NodeManager (3072 MB, the AM's 512 MB on one of them), so a map output on each.
        // Reduces of 1664 MB (1600 rounded up): one per NodeManager at a time, so two waves of two, each with a
        // reducer on each NodeManager.
        conf.setInt(MRJobConfig.MAP_MEMORY_MB, 2048);
        conf.setInt(MRJobConfig.REDUCE_MEMORY_MB, 1600);
        ExecutorService submit = Executors.newSingleThreadExecutor();
        try {
            Future<JobResult> running = submit.submit(() -> TeraSort.run(conf, new Path(dir, "input"),
                    new Path(dir, "sorted"), reduces));
            List<String> before = awaitStage(stage, "waiting-", 2, running);
            int[] httpPorts = new int[cluster.nodeManagerCount()];
            for (int i = 0; i < httpPorts.length; i++) {
                httpPorts[i] = cluster.shufflePort(i);
            }
            // The first wave's containers have started; no container of the job starts until it is done. Restart 1:
            // the READ sides lose the job (as without recovery for them, or an entry they cannot read); Hadoop's HTTP
            // side keeps its token.
            restartShuffle(httpPorts, true);
            for (String a : before) {
                touch(stage, "go-" + a);
            }
            awaitStage(stage, "shuffled-", 2, running);
            for (String a : before) {
                touch(stage, "done-" + a);
            }
            // The second wave's containers start now, one on each NodeManager: the services learn the job again.
            List<String> after = new ArrayList<>(awaitStage(stage, "waiting-", 4, running));
            after.removeAll(before);
            // Restart 2, every container of the job started: the services know it from their recovery paths alone.
            restartShuffle(httpPorts, false);
            touch(stage, "open");
            JobResult job = running.get(JOB_SECONDS, TimeUnit.SECONDS);
            assertTrue(job.succeeded(), "TeraSort failed");
            assertEquals(TeraRows.expected(SEED, rows), checkSortedAndSum(new Path(dir, "sorted")));
            assertEquals(Set.of(0, 1), nodeManagersOf(job.succeededAttempts(true)), "map outputs on both");

            for (String a : before) { // over HTTP from the restarted services, READs asked again at each turn
                Map<String, Long> c = stageCounters(stage, a);
                assertEquals(0, c.get("MAPS_READ"), a + ": the restarted services did not know the job: " + c);
                assertTrue(c.get("MAPS_VIA_HTTP") >= maps, a + " fetched over HTTP: " + c);
                assertTrue(c.get("SERVICE_UNREACHABLE") >= 2, a + ": both refused the unknown job: " + c);
                assertEquals(0, c.get("HOSTS_VIA_HTTP"), a + ": no host sent to HTTP for good: " + c);
                assertEquals(0, c.get("READ_FAILURES"), a + ": " + c);
            }
            assertEquals(2, after.size(), "the second wave: " + after);
            for (String a : after) {
                Map<String, Long> c = stageCounters(stage, a);
                assertEquals(maps, c.get("MAPS_READ"), a + " READ every map output after the restart: " + c);
                assertEquals(0, c.get("MAPS_VIA_HTTP"), a + ": " + c);
                assertEquals(0, c.get("SERVICE_UNREACHABLE"), a + ": " + c);
                assertEquals(0, c.get("READ_FAILURES"), a + ": " + c);
            }
            assertEquals((long) maps * reduces, job.counter(TaskCounter.SHUFFLED_MAPS));
            assertEquals(0, job.counter(TaskCounter.FAILED_SHUFFLE), "no fetch failed");
            assertNoMapBlamed(job, maps);
            assertEquals(reduces, job.counter(JobCounter.TOTAL_LAUNCHED_REDUCES), "no reducer failed");
            awaitNoKeptJobs();
        } finally {
            touch(stage, "open");
            submit.shutdownNow();
        }
    }

    /** The applications NodeManager {@code index}'s service keeps (files of its recovery path's job store). */
    /**
     * Stops {@code mapreduce_shuffle} on both NodeManagers, then starts it on the HTTP ports it had ({@code httpPorts},
     * the ones the ApplicationMaster told the reducers); with {@code forget} the READ sides' kept jobs are deleted
     * meanwhile (each NodeManager kept the running job before).
     */
    private void restartShuffle(int[] httpPorts, boolean forget) throws Exception {
        for (int i = 0; i < httpPorts.length; i++) {
            String[] kept = keptJobs(i);
            assertEquals(1, kept.length, "NodeManager " + i + " keeps the job's secret: " + Arrays.toString(kept));
            cluster.stopAuxService(i, MapReduceCluster.RDMA_SERVICE_NAME);
            if (forget) {
                Files.delete(new File(keptDir(i), kept[0]).toPath());
            }
        }
        assertFalse(listening(port, false), "the service still listens on " + port + " after its stop");
        for (int httpPort : httpPorts) {
            assertFalse(listening(httpPort, false), "HTTP still up on " + httpPort);
        }
        for (int i = 0; i < httpPorts.length; i++) {
            cluster.startAuxService(i, MapReduceCluster.RDMA_SERVICE_NAME, MapReduceCluster.RDMA_SERVICE_CLASS,
                    Map.of(org.apache.hadoop.mapred.ShuffleHandler.SHUFFLE_PORT_CONFIG_KEY,
                            Integer.toString(httpPorts[i])));
            assertEquals(httpPorts[i], cluster.shufflePort(i), "NodeManager " + i + "'s HTTP port kept");
        }
        assertTrue(listening(port, true), "the service does not listen on " + port + " after its start");
    }

    private String[] keptJobs(int index) {
        String[] names = keptDir(index).list((d, n) -> n.startsWith("application_"));
        return names == null ? new String[0] : names;
    }

    private File keptDir(int index) {
        return new File(cluster.clusterDir(), "nm-" + index + "-aux-state/" + MapReduceCluster.RDMA_SERVICE_NAME + "/"
                + JobSecretStore.DIR_NAME);
    }

    /** Waits (30 s at most) until no NodeManager keeps a job: each forgets it once the application stops there. */
    private void awaitNoKeptJobs() throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        for (int i = 0; i < cluster.nodeManagerCount(); i++) {
            while (keptJobs(i).length > 0 && System.nanoTime() < deadline) {
                Thread.sleep(100);
            }
            assertEquals(0, keptJobs(i).length, "NodeManager " + i + " still keeps " + Arrays.toString(keptJobs(i)));
        }
    }

    @Test
    @Timeout(420)
    void shouldRerunTheReduceBlamingNoMapWhenItsMergeFillsTheDisk() throws Exception {
        final long rows = 8_000; // 400 KB for each of two reducers, merged to disk before the reduce
        final int maps = 2;
        final int reduces = 2;
        File probe = new File(cluster.clusterDir(), "mrt-probe");
        Assumptions.assumeTrue(probe.mkdirs() || probe.isDirectory(), "cannot create " + probe);
        String why = mount(probe);
        Assumptions.assumeTrue(why == null, "a tmpfs cannot be mounted here (" + why + "): needs root or"
                + " CAP_SYS_ADMIN");
        unmount(probe);

        Path dir = new Path(cluster.workDir(), "disk-full");
        TeraRows.writeFiles(new Path(dir, "input"), rows, maps, SEED + 1);
        File stage = stageDir("disk-full");
        Configuration conf = stagedJob(stage, rows, maps);
        // As Hadoop's default: no map output stays in memory for the reduce, so the final merge writes them all.
        conf.setFloat(MRJobConfig.REDUCE_INPUT_BUFFER_PERCENT, 0f);
        ExecutorService submit = Executors.newSingleThreadExecutor();
        try {
            Future<JobResult> running = submit.submit(() -> TeraSort.run(conf, new Path(dir, "input"),
                    new Path(dir, "sorted"), reduces));
            String victim = awaitStage(stage, "waiting-", 1, running).get(0);
            // Where the attempt's merge writes (YarnOutputFiles: <local dir>/output/<attempt>/map_N.out.merged).
            List<String> localDirs = Files.readAllLines(new File(stage, "waiting-" + victim).toPath());
            assertFalse(localDirs.isEmpty(), "the attempt named no local dir");
            for (String local : localDirs) {
                File target = new File(local, "output/" + victim);
                assertTrue(target.mkdirs() || target.isDirectory(), "cannot create " + target);
                String failed = mount(target);
                assertEquals(null, failed, "mounting a tmpfs on " + target);
            }
            touch(stage, "open");
            JobResult job = running.get(JOB_SECONDS, TimeUnit.SECONDS);
            assertTrue(job.succeeded(), "TeraSort failed");
            assertEquals(TeraRows.expected(SEED + 1, rows), checkSortedAndSum(new Path(dir, "sorted")));

            List<TaskCompletionEvent> victims = job.completionEvents().stream()
                    .filter(e -> e.getTaskAttemptId().toString().equals(victim)).toList();
            assertEquals(1, victims.size(), victim + ": " + job.completionEvents());
            assertEquals(TaskCompletionEvent.Status.FAILED, victims.get(0).getStatus(), "the full disk's attempt");
            assertTrue(job.succeededAttempts(false).stream().anyMatch(e -> e.getTaskAttemptId().getTaskID()
                    .equals(victims.get(0).getTaskAttemptId().getTaskID())), "its reduce was rerun to success");
            String app = job.jobId().toString().replace("job_", "application_");
            assertTrue(logLines(app, "No space left on device") > 0, "the attempt failed for the full disk");
            assertTrue(logLines(app, "Diagnostics report from " + victim + ": Error: java.io.IOException: rdma-shuffle:"
                    + " the final merge failed") > 0, victim + " failed in its final merge");
            assertEquals(1, job.counter(JobCounter.NUM_FAILED_REDUCES));
            assertEquals(reduces + 1, job.counter(JobCounter.TOTAL_LAUNCHED_REDUCES));
            assertNoMapBlamed(job, maps);
            assertEquals((long) maps * reduces, job.counter(RdmaShuffleCounter.MAPS_READ),
                    "the succeeded attempts READ every partition");
            assertEquals(0, job.counter(TaskCounter.FAILED_SHUFFLE), "no fetch failed");
        } finally {
            touch(stage, "open");
            submit.shutdownNow();
            for (File m : new ArrayList<>(mounts)) {
                unmount(m);
            }
        }
    }

    /**
     * Every map ran once and stayed succeeded, and no reduce attempt (a failed one either) reported a map's output
     * as a fetch failure: none was blamed for a reducer's trouble.
     */
    private void assertNoMapBlamed(JobResult job, int maps) throws IOException {
        String app = job.jobId().toString().replace("job_", "application_");
        // RdmaFetcher's and Hadoop's Fetcher's lines for a fetch failure they report to the scheduler
        assertEquals(0, logLines(app, "rdma-shuffle: fetching attempt_"), "a map blamed over READs");
        assertEquals(0, logLines(app, "Failed to shuffle output of"), "a map blamed over HTTP");
        assertEquals(maps, job.counter(JobCounter.TOTAL_LAUNCHED_MAPS), "maps launched");
        assertEquals(0, job.counter(JobCounter.NUM_FAILED_MAPS), "maps failed");
        List<TaskCompletionEvent> mapEvents = job.completionEvents().stream().filter(TaskCompletionEvent::isMapTask)
                .toList();
        assertEquals(maps, mapEvents.size(), "one completion event per map: " + mapEvents);
        assertTrue(mapEvents.stream().allMatch(e -> e.getStatus() == TaskCompletionEvent.Status.SUCCEEDED
                && e.getTaskAttemptId().getId() == 0), "every map's first attempt succeeded: " + mapEvents);
    }

    private Configuration stagedJob(File stage, long rows, int maps) {
        Configuration c = cluster.jobConf();
        c.set(MRConfig.SHUFFLE_CONSUMER_PLUGIN, StagedRdmaShuffle.class.getName());
        c.set(StagedRdmaShuffle.STAGE, stage.getPath());
        c.set(MapReduceRdmaConf.PORT, Integer.toString(port));
        c.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
        c.setLong(FileInputFormat.SPLIT_MAXSIZE, rows / maps * TeraRows.ROW_BYTES); // one map per input file
        return c;
    }

    private File stageDir(String name) throws IOException {
        File stage = new File(cluster.clusterDir(), "mrt-stage-" + name);
        Files.createDirectories(stage.toPath());
        return stage;
    }

    private static void touch(File stage, String name) throws IOException {
        new File(stage, name).createNewFile();
    }

    /**
     * Waits until {@code count} files named {@code prefix<attempt>} are in {@code stage} and returns their attempts
     * in name order; fails if the job ends first.
     */
    private static List<String> awaitStage(File stage, String prefix, int count, Future<?> job) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(JOB_SECONDS);
        while (true) {
            String[] names = stage.list((d, n) -> n.startsWith(prefix));
            if (names != null && names.length >= count) {
                return Arrays.stream(names).map(n -> n.substring(prefix.length())).sorted().toList();
            }
            if (job.isDone()) {
                job.get(); // its exception, if any
                throw new AssertionError("the job ended before " + count + " attempts wrote " + prefix + "*");
            }
            assertTrue(System.nanoTime() < deadline, "fewer than " + count + " attempts wrote " + prefix + "*");
            Thread.sleep(50);
        }
    }

    private static Map<String, Long> stageCounters(File stage, String attempt) throws IOException {
        Map<String, Long> counters = new HashMap<>();
        for (String line : Files.readAllLines(new File(stage, "shuffled-" + attempt).toPath())) {
            int eq = line.indexOf('=');
            if (eq > 0) {
                counters.put(line.substring(0, eq), Long.parseLong(line.substring(eq + 1)));
            }
        }
        return counters;
    }

    /** Whether something accepts connections on {@code port}, asked until the answer is {@code expected} (5 s). */
    private static boolean listening(int port, boolean expected) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (true) {
            boolean accepted;
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 1000);
                accepted = true;
            } catch (IOException e) {
                accepted = false;
            }
            if (accepted == expected || System.nanoTime() > deadline) {
                return accepted;
            }
            Thread.sleep(100);
        }
    }

    /** Mounts a 64 KiB tmpfs (device "mrt-full") on {@code dir}; null when it did, else why not. */
    private String mount(File dir) throws IOException, InterruptedException {
        String out = run("mount", "-t", "tmpfs", "-o", "size=64k,mode=1777", "mrt-full", dir.getPath());
        if (out == null) {
            mounts.add(dir);
        }
        return out;
    }

    private void unmount(File dir) {
        try {
            String out = run("umount", dir.getPath());
            if (out != null) { // busy (a task still holds a file there): detached now, gone once closed
                String lazy = run("umount", "-l", dir.getPath());
                LOG.warn("umount {} failed ({}); umount -l: {}", dir, out, lazy == null ? "done" : lazy);
            }
        } catch (IOException | InterruptedException e) {
            LOG.warn("umount {} failed: {}", dir, e.toString());
        } finally {
            mounts.remove(dir);
        }
    }

    /** Runs a command: null when it exited 0, else its exit status and output. */
    private static String run(String... command) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        if (!p.waitFor(30, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            return "timed out";
        }
        return p.exitValue() == 0 ? null : "exit " + p.exitValue() + ": " + out;
    }

    /** Lines containing {@code text} in every container log of the application. */
    private long logLines(String app, String text) throws IOException {
        long n = 0;
        for (int i = 0; i < cluster.nodeManagerCount(); i++) {
            for (File logDir : cluster.logDirs(i)) {
                File appDir = new File(logDir, app);
                if (appDir.isDirectory()) {
                    try (Stream<java.nio.file.Path> logs = Files.walk(appDir.toPath())) {
                        for (java.nio.file.Path log : logs.filter(Files::isRegularFile).toList()) {
                            try (Stream<String> lines = Files.lines(log, StandardCharsets.ISO_8859_1)) {
                                n += lines.filter(l -> l.contains(text)).count();
                            }
                        }
                    }
                }
            }
        }
        return n;
    }

    private Set<Integer> nodeManagersOf(List<TaskCompletionEvent> attempts) {
        return attempts.stream().map(e -> cluster.nodeManagerServing(e.getTaskTrackerHttp())
                .orElseThrow(() -> new AssertionError("no NodeManager serves " + e.getTaskTrackerHttp())))
                .collect(Collectors.toCollection(TreeSet::new));
    }

    /** The rows of the part files under {@code dir}, checked to be in key order across the files in name order. */
    private static TeraRows.Checksum checkSortedAndSum(Path dir) throws IOException {
        FileSystem fs = FileSystem.getLocal(new Configuration());
        FileStatus[] parts = fs.listStatus(dir, p -> p.getName().startsWith("part-"));
        Arrays.sort(parts, (x, y) -> x.getPath().getName().compareTo(y.getPath().getName()));
        byte[] row = new byte[TeraRows.ROW_BYTES];
        byte[] last = new byte[TeraRows.KEY_BYTES];
        long rows = 0;
        long sum = 0;
        for (FileStatus part : parts) {
            assertEquals(0, part.getLen() % TeraRows.ROW_BYTES, part.getPath() + " ends in a partial row");
            try (var in = fs.open(part.getPath())) {
                for (long left = part.getLen() / TeraRows.ROW_BYTES; left > 0; left--) {
                    in.readFully(row);
                    assertTrue(rows == 0 || TeraRows.compareKeys(last, TeraRows.KEY_BYTES, row,
                            TeraRows.KEY_BYTES) <= 0, "row " + rows + " out of order in " + part.getPath());
                    System.arraycopy(row, 0, last, 0, TeraRows.KEY_BYTES);
                    rows++;
                    sum += TeraRows.hash(row, 0, TeraRows.ROW_BYTES);
                }
            }
        }
        return new TeraRows.Checksum(rows, sum);
    }
}
