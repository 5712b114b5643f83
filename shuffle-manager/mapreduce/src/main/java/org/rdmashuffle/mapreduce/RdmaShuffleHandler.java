package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.nio.ByteBuffer;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.DataInputByteBuffer;
import org.apache.hadoop.io.WritableUtils;
import org.apache.hadoop.mapred.ShuffleHandler;
import org.apache.hadoop.mapreduce.security.token.JobTokenIdentifier;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.server.api.ApplicationInitializationContext;
import org.apache.hadoop.yarn.server.api.ApplicationTerminationContext;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Hadoop's {@link ShuffleHandler} with READs beside it: configured as the NodeManager's {@code mapreduce_shuffle}
 * ({@code yarn.nodemanager.aux-services.mapreduce_shuffle.class}), it serves HTTP exactly as Hadoop's does
 * (every lifecycle call goes to it first; its metadata, the HTTP port the ApplicationMaster reads, is its own) and
 * opens one transport node on the fixed port {@value MapReduceRdmaConf#PORT} that reducers of {@link RdmaShuffle}
 * READ committed map outputs from.
 *
 * <p>Every job is a realm: a connection proves the job's shuffle secret and can READ that job's outputs only. The
 * secret is the password of the job token the MapReduce ApplicationMaster hands {@code mapreduce_shuffle} with
 * each container of the job ({@link #initializeApplication}); no file of a container is read, so the service runs
 * under any container executor. Outputs are registered when a reducer first names them (a REGISTER message, see
 * {@link RegisterProtocol}), not when the map commits: a NodeManager is not told when a map commits, and a reducer
 * names exactly the attempt the ApplicationMaster says committed. When the application stops here its table is
 * withdrawn at once and its outputs are deregistered and unmapped on a thread of the service, not on the
 * NodeManager's dispatcher; all of them go when the NodeManager stops.
 *
 * <p>With NodeManager recovery on, each job's user and secret are also kept under the service's recovery path
 * ({@link JobSecretStore}) and known again when the service starts, as Hadoop's side recovers its job tokens.
 *
 * <p>Only methods that {@link ShuffleHandler} has in Hadoop 3.3, 3.4 and 3.5 alike are overridden, and nothing of
 * its internals (Netty 3 in 3.3, Netty 4 from 3.4) is touched.
 */
public class RdmaShuffleHandler extends ShuffleHandler {
    private static final Logger LOG = LoggerFactory.getLogger(RdmaShuffleHandler.class);

    /** Service data larger than this is not a job token (one is about a hundred bytes) and is not read. */
    static final int MAX_SERVICE_DATA_BYTES = 64 << 10;

    private RdmaShuffleConf rdma;
    private LocalDirs dirs;
    private ShuffleServer server;
    /** Where job secrets are kept while NodeManager recovery is on, or null. */
    private volatile JobSecretStore kept;

    /** Under {@link ShuffleHandler}'s own name; YARN runs it under the name it is configured as. */
    public RdmaShuffleHandler() {
        super();
    }

    @Override
    protected void serviceInit(Configuration conf) throws Exception {
        rdma = MapReduceRdmaConf.from(conf); // a bad key stops the NodeManager's start with every problem listed
        super.serviceInit(conf);
    }

    @Override
    protected void serviceStart() throws Exception {
        Configuration conf = getConfig();
        dirs = new LocalDirs(getAuxiliaryLocalPathHandler(), conf);
        String bindHost = conf.getTrimmed(MapReduceRdmaConf.BIND_HOST, "0.0.0.0");
        String advertised = conf.getTrimmed("yarn.nodemanager.hostname", "0.0.0.0");
        if (advertised.equals("0.0.0.0")) {
            advertised = java.net.InetAddress.getLocalHost().getCanonicalHostName();
        }
        java.util.Optional<java.net.InetAddress> bound = MapReduceRdmaConf.bindAddress(rdma); // fails naming the key
        if (bound.isPresent()) {
            bindHost = bound.get().getHostAddress();
            advertised = bindHost;
        }
        try {
            server = ShuffleServer.acquire(conf, rdma, bindHost, advertised);
        } catch (IOException | RuntimeException e) { // the transport names spark.* keys: name the user's
            throw MapReduceRdmaConf.namingMapReduceKeys(bindFailure(e));
        }
        LOG.info("rdma-shuffle: {} serves map outputs under {} at {} beside its HTTP shuffle", getName(), dirs,
                server.address());
        recoverJobs(server);
        super.serviceStart(); // on failure the service is stopped: serviceStop releases the node
    }

    /**
     * With NodeManager recovery on (YARN gives a recovery path), the jobs kept before a restart are known again at
     * once: their reducers REGISTER and READ without waiting for a new container of the job here. Nothing here fails
     * the start: a store that cannot be opened or an entry that cannot be read is a WARN.
     */
    private void recoverJobs(ShuffleServer s) {
        org.apache.hadoop.fs.Path recovery = getRecoveryPath();
        if (recovery == null) {
            return;
        }
        try {
            kept = JobSecretStore.under(new java.io.File(recovery.toUri().getPath()).toPath());
        } catch (IOException | RuntimeException e) {
            LOG.warn("rdma-shuffle: cannot keep job secrets under the recovery path {} ({}): after a restart a job is"
                    + " known again from its next container here only", recovery, e.toString());
            return;
        }
        int known = 0;
        for (JobSecretStore.Entry job : kept.load()) {
            s.jobs().recovered(job.app(), job.user(), dirs, job.secret());
            known++;
        }
        LOG.info("rdma-shuffle: {} job(s) known again from {}", known, kept.dir());
    }

    /**
     * {@code e}, explained when it is a port already taken: with its own class loader per NodeManager
     * ({@code yarn.nodemanager.aux-services.mapreduce_shuffle.classpath}) two NodeManagers of one process cannot
     * share the port's node, so the second one's bind fails.
     */
    private Throwable bindFailure(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof java.net.BindException) {
                return new IOException("rdma-shuffle: " + MapReduceRdmaConf.PORT + "=" + rdma.port() + " is taken: by"
                        + " another process, or by the service of another NodeManager of this process that has a class"
                        + " loader of its own (yarn.nodemanager.aux-services.<service>.classpath; NodeManagers of one"
                        + " process share the port only when the jar is on the NodeManager's class path). Run one"
                        + " NodeManager per host, or put the jar on the NodeManager's class path", e);
            }
        }
        return e;
    }

    @Override
    protected void serviceStop() throws Exception {
        ShuffleServer s = server;
        server = null;
        try {
            if (s != null) {
                // Another NodeManager of this process may keep the server: jobs only this one held stop here.
                for (ServedJobs.Job job : s.jobs().forget(dirs)) {
                    s.dropJob(job);
                }
                s.release();
            }
        } finally {
            super.serviceStop();
        }
    }

    /**
     * A container of a job starts here: Hadoop's HTTP side records the job token, and this service its password,
     * the job's shuffle secret. Service data that is no job token is refused with a WARN naming the application
     * (and not handed to Hadoop's side, which would allocate whatever lengths it claims); nothing is thrown to the
     * NodeManager's dispatcher.
     */
    @Override
    public void initializeApplication(ApplicationInitializationContext context) {
        ByteBuffer data = context.getApplicationDataForService();
        Token<JobTokenIdentifier> token;
        try {
            token = readJobToken(data == null ? null : data.duplicate()); // Hadoop's side reads the buffer itself
        } catch (IOException | RuntimeException e) {
            LOG.warn("rdma-shuffle: application {} of {}: its service data is no job token ({}): none of its map"
                    + " outputs are served here", context.getApplicationId(), context.getUser(), e.getMessage());
            return;
        }
        super.initializeApplication(context);
        ShuffleServer s = server;
        byte[] secret = token.getPassword();
        if (s != null) {
            ServedJobs.Job job = s.jobs().learn(context.getApplicationId(), context.getUser(), dirs, secret);
            byte[] held = s.jobs().secretOf(job.realm()); // the store keeps the secret the job is served with
            secret = held != null ? held : secret;
        }
        JobSecretStore store = kept;
        if (store != null) {
            store.save(context.getApplicationId(), context.getUser(), secret);
        }
    }

    @Override
    public void stopApplication(ApplicationTerminationContext context) {
        super.stopApplication(context);
        JobSecretStore store = kept;
        if (store != null) {
            store.remove(context.getApplicationId());
        }
        ShuffleServer s = server;
        if (s == null) {
            return;
        }
        ServedJobs.Job job = s.jobs().stopped(context.getApplicationId(), dirs);
        if (job != null) {
            s.dropJob(job);
            LOG.debug("rdma-shuffle: job {} stopped; its outputs are being deregistered", job.realm());
        }
    }

    /**
     * The job token {@code data} holds, serialized as Hadoop's {@code ShuffleHandler.serializeServiceData} writes
     * it: identifier, password, kind and service, each a length then its bytes. Every length is checked against
     * the bytes that remain before {@link Token#readFields} allocates it.
     *
     * @throws IOException when {@code data} is absent, empty, larger than {@value #MAX_SERVICE_DATA_BYTES} bytes,
     *     or not a job token with a password
     */
    static Token<JobTokenIdentifier> readJobToken(ByteBuffer data) throws IOException {
        if (data == null || !data.hasRemaining()) {
            throw new IOException("none (a job hands its token to the service named mapreduce_shuffle only:"
                    + " configure this service as mapreduce_shuffle)");
        }
        int total = data.remaining();
        if (total > MAX_SERVICE_DATA_BYTES) {
            throw new IOException(total + " bytes, more than " + MAX_SERVICE_DATA_BYTES);
        }
        DataInputByteBuffer check = new DataInputByteBuffer();
        check.reset(data.duplicate());
        for (String field : new String[] {"identifier", "password", "kind", "service"}) {
            int length = WritableUtils.readVInt(check);
            int left = total - check.getPosition();
            if (length < 0 || length > left) {
                throw new IOException("its " + field + " claims " + length + " bytes where " + left + " remain");
            }
            check.readFully(new byte[length]);
        }
        DataInputByteBuffer in = new DataInputByteBuffer();
        in.reset(data.duplicate());
        Token<JobTokenIdentifier> token = new Token<>();
        token.readFields(in);
        if (token.getPassword().length == 0) {
            throw new IOException("a token without a password");
        }
        return token;
    }

    /** The running server (tests). */
    ShuffleServer server() {
        return server;
    }
}
