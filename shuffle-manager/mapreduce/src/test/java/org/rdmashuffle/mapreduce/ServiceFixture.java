package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.SplittableRandom;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapred.IndexRecord;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.ShuffleHandler;
import org.apache.hadoop.mapred.SpillRecord;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.mapreduce.security.token.JobTokenIdentifier;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.server.api.ApplicationInitializationContext;

/**
 * The NodeManager's service started as a NodeManager starts it, and jobs handed to it as YARN hands them: the
 * job token the MapReduce ApplicationMaster puts in each container's service data for {@code mapreduce_shuffle}
 * ({@link ShuffleHandler#serializeServiceData}), given in {@code initializeApplication}.
 */
final class ServiceFixture {
    /** The cluster timestamp of the fixture's applications. */
    static final long CLUSTER_TIMESTAMP = 1_700_000_000_000L;

    private ServiceFixture() {
    }

    /** A port nobody listens on now. */
    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    /**
     * A NodeManager's configuration: local dir {@code localDir}, the service on {@code port} of 127.0.0.1 over tcp,
     * and the HTTP shuffle on a port of its choosing ({@code mapreduce.shuffle.port=0}).
     */
    static Configuration nodeManagerConf(Path localDir, int port) {
        Configuration c = new Configuration(false);
        c.set(MapReduceRdmaConf.NM_LOCAL_DIRS, localDir.toString());
        c.set(MapReduceRdmaConf.PORT, Integer.toString(port));
        c.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
        c.set(MapReduceRdmaConf.BIND_HOST, "127.0.0.1");
        c.set("yarn.nodemanager.hostname", "127.0.0.1");
        c.setInt(ShuffleHandler.SHUFFLE_PORT_CONFIG_KEY, 0);
        return c;
    }

    /** The service, initialised and started with {@code conf}. */
    static RdmaShuffleHandler started(Configuration conf) {
        RdmaShuffleHandler service = new RdmaShuffleHandler();
        service.init(conf);
        service.start();
        return service;
    }

    static ApplicationId app(int number) {
        return ApplicationId.newInstance(CLUSTER_TIMESTAMP, number);
    }

    static JobID jobOf(ApplicationId app) {
        return new JobID(Long.toString(app.getClusterTimestamp()), app.getId());
    }

    static ApplicationId appOf(JobID job) {
        return ApplicationId.newInstance(Long.parseLong(job.getJtIdentifier()), job.getId());
    }

    /** The service data the ApplicationMaster hands {@code mapreduce_shuffle}: the job token, password {@code secret}. */
    static ByteBuffer serviceData(ApplicationId app, byte[] secret) throws IOException {
        Token<JobTokenIdentifier> token = new Token<>(new JobTokenIdentifier(new Text(jobOf(app).toString())).getBytes(),
                secret, JobTokenIdentifier.KIND_NAME, new Text("127.0.0.1:0"));
        return ShuffleHandler.serializeServiceData(token);
    }

    /** Hands {@code service} application {@code number} of {@code user} with its job token; returns the job. */
    static JobID initJob(RdmaShuffleHandler service, String user, int number, byte[] secret) throws IOException {
        ApplicationId app = app(number);
        service.initializeApplication(new ApplicationInitializationContext(user, app, serviceData(app, secret)));
        return jobOf(app);
    }

    /**
     * Writes map {@code map}'s attempt {@code attempt} output of {@code reduces} partitions of random bytes under
     * {@code localDir} as a map task of {@code user} does (each partition's raw length twice its length); returns
     * the partitions.
     */
    static byte[][] writeMapOutput(Path localDir, String user, JobID job, int map, int attempt, int reduces, long seed)
            throws IOException {
        TaskAttemptID id = new TaskAttemptID(new TaskID(job, TaskType.MAP, map), attempt);
        Path out = localDir.resolve(LocalDirs.appBase(user, appOf(job).toString())).resolve("output")
                .resolve(id.toString());
        Files.createDirectories(out);
        SplittableRandom rnd = new SplittableRandom(seed);
        byte[][] parts = new byte[reduces][];
        SpillRecord index = new SpillRecord(reduces);
        long at = 0;
        try (var data = Files.newOutputStream(out.resolve("file.out"))) {
            for (int p = 0; p < reduces; p++) {
                parts[p] = new byte[1 + rnd.nextInt(100_000)];
                rnd.nextBytes(parts[p]);
                data.write(parts[p]);
                index.putIndex(new IndexRecord(at, parts[p].length * 2L, parts[p].length), p);
                at += parts[p].length;
            }
        }
        index.writeToFile(new org.apache.hadoop.fs.Path(out.resolve("file.out.index").toString()), new JobConf());
        return parts;
    }

    /** The messages of {@code e} and its causes, " | " between them. */
    static String messages(Throwable e) {
        StringBuilder b = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            b.append(t.getMessage()).append(" | ");
        }
        return b.toString();
    }
}
