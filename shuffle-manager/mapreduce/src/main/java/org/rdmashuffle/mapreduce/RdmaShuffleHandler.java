package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.nio.ByteBuffer;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.server.api.ApplicationInitializationContext;
import org.apache.hadoop.yarn.server.api.ApplicationTerminationContext;
import org.apache.hadoop.yarn.server.api.AuxiliaryService;
import org.apache.hadoop.yarn.server.api.ContainerInitializationContext;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The NodeManager auxiliary service {@value MapReduceRdmaConf#SERVICE_NAME}, beside Hadoop's
 * {@code mapreduce_shuffle} (which keeps serving HTTP): one transport node on the fixed port
 * {@value MapReduceRdmaConf#PORT} that reducers of {@link RdmaShuffle} READ committed map outputs from.
 *
 * <p>Every job is a realm: a connection proves the job's shuffle secret (the one its tasks hold) and can READ
 * that job's outputs only. Outputs are registered when a reducer first names them (a REGISTER message, see
 * {@link RegisterProtocol}), not when the map commits: a NodeManager is not told when a map commits, and a
 * reducer names exactly the attempt the ApplicationMaster says committed, so an obsolete attempt is never
 * registered for it. When the application stops here its table is withdrawn at once (nothing more is served to the
 * job) and its outputs are deregistered and unmapped on a thread of the service, not on the NodeManager's
 * dispatcher; all of them go when the NodeManager stops.
 *
 * <p>Bounded like a Spark executor's node: registered bytes ({@code mapreduce.shuffle.rdma.maxRegisteredOutputBytes},
 * past which outputs go over HTTP), connections per node and per source address.
 */
public class RdmaShuffleHandler extends AuxiliaryService {
    private static final Logger LOG = LoggerFactory.getLogger(RdmaShuffleHandler.class);

    static final String CONTAINER_EXECUTOR = "yarn.nodemanager.container-executor.class";
    static final String DEFAULT_EXECUTOR = "org.apache.hadoop.yarn.server.nodemanager.DefaultContainerExecutor";

    private RdmaShuffleConf rdma;
    private LocalDirs dirs;
    private ShuffleServer server;

    public RdmaShuffleHandler() {
        super(MapReduceRdmaConf.SERVICE_NAME);
    }

    @Override
    protected void serviceInit(Configuration conf) throws Exception {
        String executor = conf.getTrimmed(CONTAINER_EXECUTOR, DEFAULT_EXECUTOR);
        if (!executor.equals(DEFAULT_EXECUTOR)) {
            // Containers run as their users: a job's task could plant credentials or link a map output to a file
            // only the NodeManager may read, and this service does not check owners yet.
            throw new IllegalStateException("rdma-shuffle: " + MapReduceRdmaConf.SERVICE_NAME + " runs only with "
                    + CONTAINER_EXECUTOR + "=" + DEFAULT_EXECUTOR + ", not " + executor + " (containers running as"
                    + " other users are not supported yet; remove it from yarn.nodemanager.aux-services)");
        }
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
            throw MapReduceRdmaConf.namingMapReduceKeys(e);
        }
        LOG.info("rdma-shuffle: {} serves map outputs under {} at {}", MapReduceRdmaConf.SERVICE_NAME, dirs,
                server.address());
        super.serviceStart();
    }

    @Override
    protected void serviceStop() throws Exception {
        ShuffleServer s = server;
        server = null;
        if (s != null) {
            s.release();
        }
        super.serviceStop();
    }

    /** Every container of every application: the service learns the job and its user here. */
    @Override
    public void initializeContainer(ContainerInitializationContext context) {
        ShuffleServer s = server;
        if (s != null) {
            ApplicationId app = context.getContainerId().getApplicationAttemptId().getApplicationId();
            s.jobs().learn(app, context.getUser(), dirs, true);
        }
    }

    /** A container ended: its credentials file goes with it. */
    @Override
    public void stopContainer(org.apache.hadoop.yarn.server.api.ContainerTerminationContext context) {
        ShuffleServer s = server;
        if (s != null) {
            s.jobs().containerStopped(context.getContainerId().getApplicationAttemptId().getApplicationId());
        }
    }

    /** Only for jobs that name this service in {@code mapreduce.job.shuffle.provider.services}; nothing needed. */
    @Override
    public void initializeApplication(ApplicationInitializationContext context) {
        ShuffleServer s = server;
        if (s != null) {
            s.jobs().learn(context.getApplicationId(), context.getUser(), dirs, false);
        }
    }

    @Override
    public void stopApplication(ApplicationTerminationContext context) {
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

    /** The port reducers connect to (they learn it from their own configuration, not from this). */
    @Override
    public ByteBuffer getMetaData() {
        return ByteBuffer.allocate(4).putInt(rdma == null ? 0 : rdma.port()).flip();
    }

    /** The running server (tests). */
    ShuffleServer server() {
        return server;
    }
}
