package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.HttpURLConnection;
import java.net.URL;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.LocalDirAllocator;
import org.apache.hadoop.mapred.ShuffleHandler;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.mapreduce.security.SecureShuffleUtils;
import org.apache.hadoop.mapreduce.security.TokenCache;
import org.apache.hadoop.mapreduce.security.token.JobTokenSecretManager;
import org.apache.hadoop.mapreduce.task.reduce.ShuffleHeader;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.server.api.ApplicationInitializationContext;
import org.apache.hadoop.yarn.server.api.AuxiliaryLocalPathHandler;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.transport.NodeAddress;

/**
 * The service as a drop-in for {@code mapreduce_shuffle} on a NodeManager whose containers run as their users
 * ({@code LinuxContainerExecutor} configured, its binary absent): it starts, takes each job's token from
 * {@code initializeApplication} as Hadoop's ShuffleHandler does, serves the job's REGISTERs and READs, hands the
 * same token to Hadoop's HTTP side of the service, and reads no file of any container.
 */
@Timeout(60)
class RdmaShuffleHandlerDropInTest {
    private static final String LINUX_CONTAINER_EXECUTOR =
            "org.apache.hadoop.yarn.server.nodemanager.LinuxContainerExecutor";
    private static final int REDUCES = 3;
    /** The map outputs' owner: Hadoop's HTTP side may check a file's owner is the job's user. */
    private static final String USER = System.getProperty("user.name");

    @TempDir
    Path dir;
    private Configuration conf;
    private RdmaShuffleHandler service;

    @BeforeEach
    void startService() throws Exception {
        conf = ServiceFixture.nodeManagerConf(dir, ServiceFixture.freePort());
        conf.set("yarn.nodemanager.container-executor.class", LINUX_CONTAINER_EXECUTOR);
        service = new RdmaShuffleHandler();
        service.setAuxiliaryLocalPathHandler(new LocalPaths(conf)); // as the NodeManager gives its aux services
        service.init(conf);
        service.start();
    }

    @AfterEach
    void stopService() {
        service.stop();
    }

    /** The NodeManager's paths for its aux services, over {@code yarn.nodemanager.local-dirs}. */
    private record LocalPaths(Configuration conf, LocalDirAllocator dirs) implements AuxiliaryLocalPathHandler {
        LocalPaths(Configuration conf) {
            this(conf, new LocalDirAllocator(MapReduceRdmaConf.NM_LOCAL_DIRS));
        }

        @Override
        public org.apache.hadoop.fs.Path getLocalPathForRead(String path) throws IOException {
            return dirs.getLocalPathToRead(path, conf);
        }

        @Override
        public org.apache.hadoop.fs.Path getLocalPathForWrite(String path) throws IOException {
            return dirs.getLocalPathForWrite(path, conf);
        }

        @Override
        public org.apache.hadoop.fs.Path getLocalPathForWrite(String path, long size) throws IOException {
            return dirs.getLocalPathForWrite(path, size, conf);
        }

        @Override
        public Iterable<org.apache.hadoop.fs.Path> getAllLocalPathsForRead(String path) throws IOException {
            return dirs.getAllLocalPathsToRead(path, conf);
        }
    }

    private byte[] readPartition(JobID job, byte[] secret, int map, int reduce) throws Exception {
        try (ReducerClient client = new ReducerClient(MapReduceRdmaConf.from(conf), job.toString(), secret)) {
            NodeAddress at = service.server().address();
            RegisterProtocol.Reply reply = RegisterProtocol.parseReply(client.call(at, RegisterProtocol.encode(
                    new RegisterProtocol.Request(1, REDUCES, reduce, new MapAttempt[] {new MapAttempt(map, 0)}))), 1);
            assertEquals(RegisterProtocol.OK, reply.status(), reply.reason());
            try (BlockFetcher f = client.newFetcher(1)) {
                f.add(new BlockFetcher.Request(at, reply.table(), map, 0, reduce, reduce + 1));
                try (BlockFetcher.Block b = f.next()) {
                    assertFalse(b.unregistered(), () -> "left to HTTP: " + b.viaEngineReason());
                    byte[] bytes = new byte[(int) b.length()];
                    b.bytes().get(bytes);
                    return bytes;
                }
            }
        }
    }

    /**
     * Asks the service's HTTP port (the one the ApplicationMaster reads from its metadata) for map {@code map}'s
     * partition {@code reduce} as Hadoop's fetcher does, signing the URL with {@code secret}; returns the status
     * after checking a 200's reply hash, which only a server holding the job's token can compute.
     */
    private int askOverHttp(JobID job, byte[] secret, int map, int reduce) throws IOException {
        int httpPort = ShuffleHandler.deserializeMetaData(service.getMetaData());
        TaskAttemptID attempt = new TaskAttemptID(new TaskID(job, TaskType.MAP, map), 0);
        URL url = new URL("http://127.0.0.1:" + httpPort + "/mapOutput?job=" + job + "&reduce=" + reduce + "&map="
                + attempt);
        HttpURLConnection http = (HttpURLConnection) url.openConnection();
        try {
            String urlHash = SecureShuffleUtils.hashFromString(SecureShuffleUtils.buildMsgFrom(url),
                    JobTokenSecretManager.createSecretKey(secret));
            http.setRequestProperty(SecureShuffleUtils.HTTP_HEADER_URL_HASH, urlHash);
            http.setRequestProperty(ShuffleHeader.HTTP_HEADER_NAME, ShuffleHeader.DEFAULT_HTTP_HEADER_NAME);
            http.setRequestProperty(ShuffleHeader.HTTP_HEADER_VERSION, ShuffleHeader.DEFAULT_HTTP_HEADER_VERSION);
            int status = http.getResponseCode();
            if (status == 200) {
                SecureShuffleUtils.verifyReply(http.getHeaderField(SecureShuffleUtils.HTTP_HEADER_REPLY_URL_HASH),
                        urlHash, JobTokenSecretManager.createSecretKey(secret));
            }
            return status;
        } finally {
            http.disconnect();
        }
    }

    @Test
    void shouldServeReadsAndHttpFromTheTokenYarnHandsWhenLinuxContainerExecutorIsConfiguredAndNoContainerFileExists()
            throws Exception {
        byte[] secret = "the-job-token-password".getBytes();
        JobID job = ServiceFixture.initJob(service, USER, 1, secret);
        byte[][] parts = ServiceFixture.writeMapOutput(dir, USER, job, 0, 0, REDUCES, 11);

        assertArrayEquals(parts[2], readPartition(job, secret, 0, 2));
        assertEquals(200, askOverHttp(job, secret, 0, 1), "Hadoop's HTTP shuffle of the same service knows the job");
        assertEquals(401, askOverHttp(job, "not-the-token".getBytes(), 0, 1));
        try (Stream<Path> all = Files.walk(dir)) { // nothing of a container was there to read
            List<Path> containerFiles = all.filter(p -> p.getFileName().toString().startsWith("container_")).toList();
            assertEquals(List.of(), containerFiles);
        }
    }

    @Test
    void shouldTakeTheSecretFromTheTokenAndNeverFromAContainersTokensFile() throws Exception {
        ApplicationId app = ServiceFixture.app(2);
        JobID job = ServiceFixture.jobOf(app);
        // A tripwire: the job's container directory holds credentials with another secret, as a task running as
        // the job's user could write them. Whoever reads them accepts that secret.
        ContainerId container = ContainerId.newContainerId(ApplicationAttemptId.newInstance(app, 1), 1);
        Path containerDir = dir.resolve(LocalDirs.appBase(USER, app.toString())).resolve(container.toString());
        Files.createDirectories(containerDir);
        Credentials planted = new Credentials();
        TokenCache.setShuffleSecretKey("planted-secret".getBytes(), planted);
        planted.writeTokenStorageFile(new org.apache.hadoop.fs.Path(containerDir.resolve("container_tokens").toString()),
                new Configuration(false));
        byte[] secret = "yarns-token".getBytes();
        ServiceFixture.initJob(service, USER, 2, secret);
        byte[][] parts = ServiceFixture.writeMapOutput(dir, USER, job, 0, 0, REDUCES, 12);

        IOException refused = assertThrows(IOException.class, () -> readPartition(job, "planted-secret".getBytes(), 0, 0));
        assertTrue(refused.getMessage().toLowerCase(java.util.Locale.ROOT).contains("auth"), refused.getMessage());
        assertArrayEquals(parts[0], readPartition(job, secret, 0, 0));
    }

    @Test
    void shouldWarnNamingTheApplicationAndServeNothingOfItWhenItsServiceDataIsNoJobToken() throws Exception {
        try (LoggedWarnings logged = LoggedWarnings.of(RdmaShuffleHandler.class)) {
            List<String> warnings = logged.messages();
            ByteBuffer token = ServiceFixture.serviceData(ServiceFixture.app(3), "s".repeat(20).getBytes());
            ByteBuffer cut = token.duplicate();
            cut.limit(cut.limit() - 5);
            ByteBuffer[] bad = {null, ByteBuffer.allocate(0), cut,
                ByteBuffer.wrap(new byte[] {(byte) 0x8c, 0x7f, (byte) 0xff, (byte) 0xff, (byte) 0xff, 1}), // 2 GiB id
                ByteBuffer.allocate(RdmaShuffleHandler.MAX_SERVICE_DATA_BYTES + 1)};
            for (int i = 0; i < bad.length; i++) {
                ApplicationId app = ServiceFixture.app(10 + i);
                service.initializeApplication(new ApplicationInitializationContext(USER, app, bad[i])); // no throw
                assertFalse(service.server().jobs().hasSecret(ServiceFixture.jobOf(app).toString()));
                String expected = app.toString();
                assertTrue(warnings.size() == i + 1 && warnings.get(i).contains(expected), expected + ": " + warnings);
            }
            assertTrue(warnings.get(0).contains("configure this service as mapreduce_shuffle"), warnings.get(0));
        }
        byte[] secret = "after-bad-ones".getBytes(); // and the next job is served
        JobID job = ServiceFixture.initJob(service, USER, 4, secret);
        byte[][] parts = ServiceFixture.writeMapOutput(dir, USER, job, 0, 0, REDUCES, 13);
        assertArrayEquals(parts[1], readPartition(job, secret, 0, 1));
    }
}
