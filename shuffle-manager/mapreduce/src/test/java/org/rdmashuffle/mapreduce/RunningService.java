package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.SplittableRandom;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapred.IndexRecord;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.SpillRecord;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.server.api.ApplicationTerminationContext;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.transport.NodeAddress;

/**
 * One NodeManager's service over tcp on a free port, its local dir under a test's directory, jobs handed to it
 * as YARN hands them ({@link #runJob}, through {@link ServiceFixture#initJob}), and their map outputs on disk.
 */
final class RunningService implements AutoCloseable {
    static final String USER = "alice";

    final Path localDir;
    final int port;
    final Configuration nmConf;
    final RdmaShuffleHandler service;

    RunningService(Path dir) throws Exception {
        this(dir, java.util.Map.of());
    }

    /** With NodeManager settings {@code settings} besides this fixture's. */
    RunningService(Path dir, java.util.Map<String, String> settings) throws Exception {
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        localDir = dir.resolve("nm");
        Files.createDirectories(localDir);
        nmConf = new Configuration(false);
        nmConf.set(MapReduceRdmaConf.NM_LOCAL_DIRS, localDir.toString());
        nmConf.set(MapReduceRdmaConf.PORT, Integer.toString(port));
        nmConf.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
        nmConf.set(MapReduceRdmaConf.PREFIX + "bindHost", "127.0.0.1");
        nmConf.set("yarn.nodemanager.hostname", "127.0.0.1");
        settings.forEach(nmConf::set);
        service = new RdmaShuffleHandler();
        service.init(nmConf);
        service.start();
    }

    ShuffleServer server() {
        return service.server();
    }

    NodeAddress address() {
        return new NodeAddress("127.0.0.1", port, server().address().provider());
    }

    /** A job of this NodeManager's user holding {@code secret}, handed to the service as YARN hands it. */
    JobID runJob(int appNumber, byte[] secret) throws Exception {
        JobID job = ServiceFixture.initJob(service, USER, appNumber, secret);
        assertTrue(server().jobs().hasSecret(job.toString()), "the service knows the secret of " + job);
        return job;
    }

    /** The application stopped on this NodeManager (its outputs are deregistered, on the job-stop thread). */
    void stopJob(JobID job) throws Exception {
        ApplicationId app = ApplicationId.newInstance(Long.parseLong(job.getJtIdentifier()), job.getId());
        service.stopApplication(new ApplicationTerminationContext(app));
        server().awaitDeregistrations();
    }

    /** {@code <local dir>/usercache/<user>/appcache/<app>/output/<attempt>}. */
    Path attemptDir(JobID job, int map, int attempt) {
        ApplicationId app = ApplicationId.newInstance(Long.parseLong(job.getJtIdentifier()), job.getId());
        TaskAttemptID id = new TaskAttemptID(new TaskID(job, TaskType.MAP, map), attempt);
        return localDir.resolve(LocalDirs.appBase(USER, app.toString())).resolve("output").resolve(id.toString());
    }

    /** Writes a map attempt's output of partitions of the given sizes, random bytes from {@code seed}. */
    byte[][] writeMapOutput(JobID job, int map, int attempt, long seed, int... sizes) throws IOException {
        Path out = attemptDir(job, map, attempt);
        Files.createDirectories(out);
        return writeOutputFiles(out, seed, sizes);
    }

    /** {@code file.out} and {@code file.out.index} in {@code dir} (the index's raw lengths twice the parts'). */
    static byte[][] writeOutputFiles(Path dir, long seed, int... sizes) throws IOException {
        SplittableRandom rnd = new SplittableRandom(seed);
        byte[][] parts = new byte[sizes.length][];
        SpillRecord index = new SpillRecord(sizes.length);
        long at = 0;
        try (var data = Files.newOutputStream(dir.resolve("file.out"))) {
            for (int p = 0; p < sizes.length; p++) {
                parts[p] = new byte[sizes[p]];
                rnd.nextBytes(parts[p]);
                data.write(parts[p]);
                index.putIndex(new IndexRecord(at, parts[p].length * 2L, parts[p].length), p);
                at += parts[p].length;
            }
        }
        index.writeToFile(new org.apache.hadoop.fs.Path(dir.resolve("file.out.index").toString()), new JobConf());
        return parts;
    }

    ReducerClient reducer(JobID job, byte[] secret) throws IOException {
        return new ReducerClient(MapReduceRdmaConf.from(nmConf), job.toString(), secret);
    }

    static RegisterProtocol.Reply register(ReducerClient client, NodeAddress service, int maps, int reduces,
                                           int reduce, MapAttempt... attempts) throws Exception {
        ByteBuffer reply = client.call(service, RegisterProtocol.encode(
                new RegisterProtocol.Request(maps, reduces, reduce, attempts)));
        return RegisterProtocol.parseReply(reply, attempts.length);
    }

    @Override
    public void close() {
        service.stop();
    }
}
