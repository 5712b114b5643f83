package org.rdmashuffle.mapreduce.cluster;

import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.Set;
import java.util.TreeSet;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapred.ShuffleHandler;
import org.apache.hadoop.mapreduce.MRConfig;
import org.apache.hadoop.mapreduce.MRJobConfig;
import org.apache.hadoop.mapreduce.v2.MiniMRYarnCluster;
import org.apache.hadoop.util.VersionInfo;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.nodemanager.NodeManager;
import org.apache.hadoop.yarn.server.nodemanager.containermanager.AuxServices;
import org.apache.hadoop.yarn.server.nodemanager.containermanager.records.AuxServiceConfiguration;
import org.apache.hadoop.yarn.server.nodemanager.containermanager.records.AuxServiceRecord;
import org.apache.hadoop.yarn.server.nodemanager.containermanager.records.AuxServiceRecords;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A real Hadoop MapReduce cluster in this JVM, for tests: one ResourceManager and two NodeManagers of a
 * {@link MiniMRYarnCluster} on the local file system (no HDFS). Every NodeManager runs a shuffle service as
 * {@value ShuffleHandler#MAPREDUCE_SHUFFLE_SERVICEID}: Hadoop's own {@link ShuffleHandler}, or, when asked for with
 * {@link Builder#withRdmaService(boolean)} and where the class can be loaded, {@value #RDMA_SERVICE_CLASS} in its
 * place (a drop-in: Hadoop's HTTP shuffle and READs from one service), each on ports of its own
 * ({@code mapreduce.shuffle.port} 0).
 *
 * <h2>How the auxiliary services are installed</h2>
 * {@code MiniMRYarnCluster.serviceInit} overwrites {@code yarn.nodemanager.aux-services} with just
 * {@code mapreduce_shuffle}, so the list cannot be configured. Instead the NodeManagers run with the aux-services
 * manifest enabled ({@code yarn.nodemanager.aux-services.manifest.enabled}) and no manifest file, which makes
 * {@link AuxServices} ignore that key and start with no service; once the cluster is up, each NodeManager is given
 * the list through {@link AuxServices#reload(AuxServiceRecords)}, the public call behind the NodeManager's
 * {@code PUT /ws/v1/node/auxiliaryservices}. (A manifest file would do the same, but AuxServices rejects one
 * with any group- or world-writable ancestor, and a checkout under /tmp has one.) Each service is initialised with
 * the NodeManager's configuration, so {@link Builder#nodeManagerSetting} reaches it.
 *
 * <h2>How containers get the classpath</h2>
 * In a mini cluster ({@code yarn.is.minicluster}) the MR client and ApplicationMaster put their own
 * {@code java.class.path} on each container's CLASSPATH ({@code MRApps.setMRFrameworkClasspath}). The MR AM and
 * every YarnChild therefore see the test classpath: this module's classes and test classes and its dependencies.
 *
 * <h2>Sizing for a 2-core machine</h2>
 * Each NodeManager offers {@value #NODE_MANAGER_MEMORY_MB} MB; the AM and each map take {@value #AM_MEMORY_MB} and
 * {@value #MAP_MEMORY_MB} MB, a reduce {@value #REDUCE_MEMORY_MB} MB (heaps 384, 384 and 512 MB). An AM and eight
 * maps need nine 512 MB slots and a NodeManager has six, so the maps of an eight-map job run on both NodeManagers.
 * Reduces start only once every map has finished ({@code mapreduce.job.reduce.slowstart.completedmaps = 1.0}), so
 * they never hold memory the maps wait for, and at most three fit on a NodeManager: four reduces run on both.
 * Heartbeats and polls are 100 ms; speculation is off so attempts are the tasks themselves.
 *
 * <h2>What stays on disk</h2>
 * NodeManagers delete nothing: container logs ({@link #logDirs}) and local dirs ({@link #localDirs}, with the map
 * outputs) stay under {@link #clusterDir()} after the jobs and after {@link #close()}, for the test or a person to
 * read; {@code mvn clean} removes them.
 *
 * <p>Not thread safe: build, use and close it from one test thread. {@link #close()} is idempotent.
 */
public final class MapReduceCluster implements AutoCloseable {
    /** The NodeManager aux-service name the RDMA shuffle handler runs under: a drop-in for Hadoop's. */
    public static final String RDMA_SERVICE_NAME = ShuffleHandler.MAPREDUCE_SHUFFLE_SERVICEID;
    /** The class of the RDMA shuffle handler, loaded by name so that this harness works before it exists. */
    public static final String RDMA_SERVICE_CLASS = "org.rdmashuffle.mapreduce.RdmaShuffleHandler";

    public static final int NODE_MANAGERS = 2;
    public static final int NODE_MANAGER_MEMORY_MB = 3072;
    public static final int AM_MEMORY_MB = 512;
    public static final int MAP_MEMORY_MB = 512;
    public static final int REDUCE_MEMORY_MB = 1024;
    /** How often NodeManagers heartbeat the RM, the AM asks the RM for containers and the job client polls. */
    public static final int POLL_INTERVAL_MS = 100;

    /** Options for short-lived task JVMs on two cores: a serial collector and only the C1 compiler. */
    private static final String TASK_JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1" + java17Opens();

    /** Whether MiniMRYarnCluster starts its JobHistoryServer (Hadoop 3.4+; 3.3 always starts it). */
    private static final String HISTORY_SERVER_ENABLED = "mapreduce.jobhistory.minicluster.enabled";

    private static final Logger LOG = LoggerFactory.getLogger(MapReduceCluster.class);

    private final MiniMRYarnCluster cluster;
    private final Map<String, String> jobSettings;
    private final boolean rdmaServiceRunning;
    private final long startMs;
    private boolean closed;

    private MapReduceCluster(MiniMRYarnCluster cluster, Map<String, String> jobSettings, boolean rdmaServiceRunning,
            long startMs) {
        this.cluster = cluster;
        this.jobSettings = jobSettings;
        this.rdmaServiceRunning = rdmaServiceRunning;
        this.startMs = startMs;
    }

    public static Builder builder(String name) {
        return new Builder(name);
    }

    /** Whether {@value #RDMA_SERVICE_CLASS} can be loaded here (it is written in this module's main code). */
    public static boolean rdmaServiceClassPresent() {
        try {
            Class.forName(RDMA_SERVICE_CLASS, false, MapReduceCluster.class.getClassLoader());
            return true;
        } catch (ClassNotFoundException | LinkageError e) {
            return false;
        }
    }

    /**
     * A fresh job configuration pointing at this cluster: the cluster's own settings (RM address, staging
     * directory, container sizes, poll intervals) plus the builder's job settings. Callers add their own.
     */
    public Configuration jobConf() {
        Configuration conf = new Configuration(cluster.getConfig());
        jobSettings.forEach(conf::set);
        return conf;
    }

    /** A directory on the local file system for job inputs and outputs, under the cluster's directory. */
    public Path workDir() throws IOException {
        Path dir = new Path(new File(cluster.getTestWorkDir(), "work").toURI());
        FileSystem.getLocal(cluster.getConfig()).mkdirs(dir);
        return dir;
    }

    /** The cluster's directory (target/test/data/NAME/yarn-*): NodeManager local and log dirs, staging, work. */
    public File clusterDir() {
        return cluster.getTestWorkDir();
    }

    /** How long {@link Builder#start()} took, in milliseconds. */
    public long startMs() {
        return startMs;
    }

    public int nodeManagerCount() {
        return NODE_MANAGERS;
    }

    /** NodeManager {@code index} (0 or 1), for what this class does not expose. */
    public NodeManager nodeManager(int index) {
        return cluster.getNodeManager(index);
    }

    /** The directories NodeManager {@code index} keeps container logs in (application_*&#47;container_*&#47;syslog). */
    public List<File> logDirs(int index) {
        return dirs(index, YarnConfiguration.NM_LOG_DIRS);
    }

    /** The NodeManager's local directories (usercache with the map outputs, filecache, nmPrivate). */
    public List<File> localDirs(int index) {
        return dirs(index, YarnConfiguration.NM_LOCAL_DIRS);
    }

    private List<File> dirs(int index, String key) {
        List<File> dirs = new ArrayList<>();
        for (String dir : nodeManager(index).getConfig().getTrimmedStrings(key)) {
            dirs.add(new File(dir));
        }
        return dirs;
    }

    /** The aux services running on NodeManager {@code index}, by name. */
    public Set<String> auxServices(int index) {
        return new TreeSet<>(auxServicesOf(nodeManager(index)).getMetaData().keySet());
    }

    /** The metadata aux service {@code service} on NodeManager {@code index} hands to containers, if it runs. */
    public Optional<ByteBuffer> auxServiceMetaData(int index, String service) {
        ByteBuffer meta = auxServicesOf(nodeManager(index)).getMetaData().get(service);
        return Optional.ofNullable(meta).map(ByteBuffer::asReadOnlyBuffer);
    }

    /** The port Hadoop's ShuffleHandler listens on in NodeManager {@code index}. */
    public int shufflePort(int index) {
        ByteBuffer meta = auxServiceMetaData(index, ShuffleHandler.MAPREDUCE_SHUFFLE_SERVICEID)
                .orElseThrow(() -> new IllegalStateException("no mapreduce_shuffle on NodeManager " + index));
        try {
            return ShuffleHandler.deserializeMetaData(meta);
        } catch (IOException e) {
            throw new IllegalStateException("unreadable mapreduce_shuffle metadata on NodeManager " + index, e);
        }
    }

    /**
     * Which NodeManager serves map outputs at {@code mapOutputServer}, the address a task completion event names
     * ({@code TaskCompletionEvent.getTaskTrackerHttp()}, "http://host:shufflePort"): the NodeManager the attempt ran
     * on, told apart by its ShuffleHandler's port since both run on one host.
     */
    public OptionalInt nodeManagerServing(String mapOutputServer) {
        int port = URI.create(mapOutputServer).getPort();
        for (int i = 0; i < NODE_MANAGERS; i++) {
            if (shufflePort(i) == port) {
                return OptionalInt.of(i);
            }
        }
        return OptionalInt.empty();
    }

    /** Whether every NodeManager runs {@value #RDMA_SERVICE_CLASS} (as {@value #RDMA_SERVICE_NAME}). */
    public boolean rdmaServiceRunning() {
        return rdmaServiceRunning;
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        cluster.stop();
    }

    /**
     * What Hadoop 3.3's task JVMs need on Java 17 and 3.3 does not add: the ApplicationMaster's web app (Guice's
     * cglib) defines classes through {@code ClassLoader.defineClass}. Hadoop 3.4 adds these flags to every container
     * itself ({@code mapreduce.jvm.add-opens-as-default}) and 3.5 no longer needs them; there it is "".
     */
    private static String java17Opens() {
        String[] version = VersionInfo.getVersion().split("[.-]");
        boolean before34 = Integer.parseInt(version[0]) == 3 && Integer.parseInt(version[1]) < 4;
        return before34 ? " --add-opens=java.base/java.lang=ALL-UNNAMED" : "";
    }

    private static AuxServices auxServicesOf(NodeManager nodeManager) {
        return nodeManager.getNMContext().getAuxServices();
    }

    /** Settings of a {@link MapReduceCluster}; {@link #start()} starts it. */
    public static final class Builder {
        private final String name;
        private final Map<String, String> nodeManagerSettings = new LinkedHashMap<>();
        private final Map<String, String> jobSettings = new LinkedHashMap<>();
        private boolean rdmaService;
        private boolean historyServer;
        private boolean auxServiceRecovery;

        private Builder(String name) {
            this.name = name;
        }

        /**
         * Run {@value #RDMA_SERVICE_CLASS} as mapreduce_shuffle on every NodeManager. Ignored, with a warning,
         * while {@value #RDMA_SERVICE_CLASS} cannot be loaded; {@link #rdmaServiceRunning()} tells which.
         */
        public Builder withRdmaService(boolean enabled) {
            this.rdmaService = enabled;
            return this;
        }

        /**
         * Give every aux service a recovery path (its own directory under {@code <cluster dir>/nm-<i>-aux-state}),
         * as a NodeManager with {@code yarn.nodemanager.recovery.enabled} does: Hadoop's ShuffleHandler keeps its job
         * tokens there, and the drop-in its job secrets. NodeManager recovery itself cannot be turned on in a
         * MiniYARNCluster of two NodeManagers (it refuses the ephemeral NodeManager ports the mini cluster uses, and
         * its state store would be one directory for both), so the NodeManagers' {@link AuxServices} are given the
         * root their {@code serviceInit} would have computed before the services start (its private field
         * {@code stateStoreRoot}, the same in Hadoop 3.3, 3.4 and 3.5).
         */
        public Builder withAuxServiceRecovery(boolean enabled) {
            this.auxServiceRecovery = enabled;
            return this;
        }

        /**
         * Run MiniMRYarnCluster's JobHistoryServer (off by default: it costs start-up time, and the job client
         * reads counters and completion events from the AM, which stays up for five seconds after a job ends).
         * Hadoop 3.3's MiniMRYarnCluster starts it whatever this says.
         */
        public Builder withHistoryServer(boolean enabled) {
            this.historyServer = enabled;
            return this;
        }

        /**
         * A setting the NodeManagers see, and so each aux service's {@code serviceInit} (for example
         * {@code mapreduce.shuffle.rdma.port}); it lands in the configuration every daemon of the cluster reads.
         */
        public Builder nodeManagerSetting(String key, String value) {
            nodeManagerSettings.put(key, value);
            return this;
        }

        /** A setting every {@link #jobConf()} carries (for example the shuffle consumer plugin). */
        public Builder jobSetting(String key, String value) {
            jobSettings.put(key, value);
            return this;
        }

        public MapReduceCluster start() throws IOException {
            long begin = System.nanoTime();
            boolean rdma = rdmaService && rdmaServiceClassPresent();
            if (rdmaService && !rdma) {
                LOG.warn("{} cannot be loaded: the NodeManagers run Hadoop's ShuffleHandler", RDMA_SERVICE_CLASS);
            }
            MiniMRYarnCluster cluster = new MiniMRYarnCluster(name, NODE_MANAGERS);
            try {
                cluster.init(configuration());
                cluster.start();
                List<AuxServiceRecord> records = new ArrayList<>();
                records.add(service(ShuffleHandler.MAPREDUCE_SHUFFLE_SERVICEID,
                        rdma ? RDMA_SERVICE_CLASS : ShuffleHandler.class.getName()));
                AuxServiceRecords services =
                        new AuxServiceRecords().serviceList(records.toArray(new AuxServiceRecord[0]));
                for (int i = 0; i < NODE_MANAGERS; i++) {
                    AuxServices auxServices = auxServicesOf(cluster.getNodeManager(i));
                    if (auxServiceRecovery) {
                        giveRecoveryRoot(auxServices, new File(cluster.getTestWorkDir(), "nm-" + i + "-aux-state"));
                    }
                    auxServices.reload(services);
                    Set<String> running = auxServices.getMetaData().keySet();
                    for (AuxServiceRecord service : services.getServices()) {
                        if (!running.contains(service.getName())) {
                            throw new IOException("NodeManager " + i + " did not start aux service "
                                    + service.getName() + " (running: " + running + "); see the log above");
                        }
                    }
                }
            } catch (IOException | RuntimeException e) {
                try {
                    cluster.stop();
                } catch (RuntimeException e2) {
                    e.addSuppressed(e2);
                }
                throw e;
            }
            long startMs = (System.nanoTime() - begin) / 1_000_000;
            LOG.info("MapReduce cluster '{}' with {} NodeManagers (aux services {}) started in {} ms; dir {}",
                    name, NODE_MANAGERS, rdma ? "mapreduce_shuffle: " + RDMA_SERVICE_CLASS : "mapreduce_shuffle",
                    startMs, cluster.getTestWorkDir());
            return new MapReduceCluster(cluster, Map.copyOf(jobSettings), rdma, startMs);
        }

        private static AuxServiceRecord service(String name, String className) {
            return service(name, className, Map.of());
        }

        /** A service record; {@code settings} land in the configuration the service is initialised with. */
        private static AuxServiceRecord service(String name, String className, Map<String, String> settings) {
            AuxServiceConfiguration conf = new AuxServiceConfiguration();
            conf.setProperty(AuxServices.CLASS_NAME, className);
            settings.forEach(conf::setProperty);
            return new AuxServiceRecord().name(name).configuration(conf);
        }

        /** What AuxServices.serviceInit sets with NodeManager recovery on: see {@link #withAuxServiceRecovery}. */
        private static void giveRecoveryRoot(AuxServices auxServices, File root) throws IOException {
            try {
                java.lang.reflect.Field rootField = AuxServices.class.getDeclaredField("stateStoreRoot");
                java.lang.reflect.Field fsField = AuxServices.class.getDeclaredField("stateStoreFs");
                rootField.setAccessible(true);
                fsField.setAccessible(true);
                rootField.set(auxServices, new org.apache.hadoop.fs.Path(root.getAbsolutePath()));
                fsField.set(auxServices, org.apache.hadoop.fs.FileSystem.getLocal(new Configuration()).getRaw());
            } catch (ReflectiveOperationException | RuntimeException e) {
                throw new IOException("cannot give the aux services a recovery path in this Hadoop: " + e, e);
            }
        }

        private Configuration configuration() {
            YarnConfiguration conf = new YarnConfiguration();
            // Aux services come from AuxServices.reload once the NodeManagers run (see the class comment).
            conf.setBoolean(YarnConfiguration.NM_AUX_SERVICES_MANIFEST_ENABLED, true);
            // MiniMRYarnCluster.MR_HISTORY_MINICLUSTER_ENABLED, by name: Hadoop 3.3 lacks it (and always starts one).
            conf.setBoolean(HISTORY_SERVER_ENABLED, historyServer);
            // Each NodeManager's HTTP shuffle (Hadoop's, or the drop-in's) on a port of its own.
            conf.setInt(ShuffleHandler.SHUFFLE_PORT_CONFIG_KEY, 0);

            // Memory: see the class comment.
            conf.setInt(YarnConfiguration.YARN_MINICLUSTER_NM_PMEM_MB, NODE_MANAGER_MEMORY_MB);
            conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
            conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, NODE_MANAGER_MEMORY_MB);
            // An AM may linger five seconds after its job: let the next job's AM start meanwhile.
            conf.setFloat("yarn.scheduler.capacity.maximum-am-resource-percent", 0.5f);
            conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
            conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
            conf.setInt(MRJobConfig.MR_AM_VMEM_MB, AM_MEMORY_MB);
            conf.set(MRJobConfig.MR_AM_COMMAND_OPTS, "-Xmx384m " + TASK_JVM_OPTIONS);
            conf.setInt(MRJobConfig.MAP_MEMORY_MB, MAP_MEMORY_MB);
            conf.set(MRJobConfig.MAP_JAVA_OPTS, "-Xmx384m " + TASK_JVM_OPTIONS);
            conf.setInt(MRJobConfig.REDUCE_MEMORY_MB, REDUCE_MEMORY_MB);
            conf.set(MRJobConfig.REDUCE_JAVA_OPTS, "-Xmx512m " + TASK_JVM_OPTIONS);
            conf.setInt(MRJobConfig.IO_SORT_MB, 32);

            // Speed: fast heartbeats and polls, reduces after the maps, no speculation, fail fast.
            conf.setLong(YarnConfiguration.RM_NM_HEARTBEAT_INTERVAL_MS, POLL_INTERVAL_MS);
            conf.setInt(MRJobConfig.MR_AM_TO_RM_HEARTBEAT_INTERVAL_MS, POLL_INTERVAL_MS);
            conf.setInt("mapreduce.client.progressmonitor.pollinterval", POLL_INTERVAL_MS);
            conf.setInt("mapreduce.client.completion.pollinterval", POLL_INTERVAL_MS);
            conf.setFloat(MRJobConfig.COMPLETED_MAPS_FOR_REDUCE_SLOWSTART, 1.0f);
            conf.setBoolean(MRJobConfig.MAP_SPECULATIVE, false);
            conf.setBoolean(MRJobConfig.REDUCE_SPECULATIVE, false);
            conf.setInt(MRJobConfig.MR_AM_MAX_ATTEMPTS, 1);
            conf.setInt(YarnConfiguration.RM_AM_MAX_ATTEMPTS, 1);
            conf.set(MRConfig.FRAMEWORK_NAME, MRConfig.YARN_FRAMEWORK_NAME);

            // NodeManagers delete nothing (a delay of -1 turns their DeletionService off) and so may hand a
            // finished application's logs to it at once (retain 0 s): an application whose log deletion is still
            // pending would hold each NodeManager's stop for about 17 seconds.
            conf.setInt(YarnConfiguration.DEBUG_NM_DELETE_DELAY_SEC, -1);
            conf.setLong(YarnConfiguration.NM_LOG_RETAIN_SECONDS, 0);

            nodeManagerSettings.forEach(conf::set);
            return conf;
        }
    }

    /**
     * Stops aux service {@code name} on NodeManager {@code index} while the NodeManager and its other services run
     * on ({@link AuxServices#reload} with the running services but that one, as an operator's
     * {@code PUT /ws/v1/node/auxiliaryservices} would).
     */
    public void stopAuxService(int index, String name) throws IOException {
        reloadAuxServices(index, name, null);
    }

    /** Starts aux service {@code name} ({@code className}) on NodeManager {@code index} beside the running ones. */
    public void startAuxService(int index, String name, String className) throws IOException {
        reloadAuxServices(index, name, className);
    }

    /**
     * Starts aux service {@code name} ({@code className}) on NodeManager {@code index} with {@code settings} in the
     * configuration it is initialised with (the record's configuration, which {@link AuxServices} lays over the
     * NodeManager's), for example the HTTP shuffle port it had before a restart.
     */
    public void startAuxService(int index, String name, String className, Map<String, String> settings)
            throws IOException {
        reloadAuxServices(index, name, className, settings);
    }

    private void reloadAuxServices(int index, String name, String className) throws IOException {
        reloadAuxServices(index, name, className, Map.of());
    }

    private void reloadAuxServices(int index, String name, String className, Map<String, String> settings)
            throws IOException {
        AuxServices auxServices = auxServicesOf(nodeManager(index));
        List<AuxServiceRecord> records = new ArrayList<>();
        for (AuxServiceRecord running : auxServices.getServiceRecords()) {
            if (!running.getName().equals(name)) {
                records.add(running); // the same record: AuxServices leaves that service running
            }
        }
        if (className != null) {
            records.add(Builder.service(name, className, settings));
        }
        auxServices.reload(new AuxServiceRecords().serviceList(records.toArray(new AuxServiceRecord[0])));
        if (auxServices.getMetaData().containsKey(name) != (className != null)) {
            throw new IOException("NodeManager " + index + " did not " + (className != null ? "start" : "stop")
                    + " aux service " + name + " (running: " + auxServices(index) + "); see the log above");
        }
    }

    @Override
    public String toString() {
        return "MapReduceCluster" + Arrays.asList(cluster.getName(), cluster.getTestWorkDir());
    }
}
