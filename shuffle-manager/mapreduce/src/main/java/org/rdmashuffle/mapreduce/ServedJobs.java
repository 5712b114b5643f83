package org.rdmashuffle.mapreduce;

import java.io.File;
import java.io.IOException;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.security.TokenCache;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The MapReduce jobs a process's service knows: one per application a NodeManager of this process ran a
 * container of (learnt at container start; forgotten when the application stops on every such NodeManager).
 * Each job is a realm of the node: its connections prove its shuffle secret, and its output table is READable
 * by them only.
 *
 * <p>The shuffle secret is the one the job's tasks hold ({@code MapReduceShuffleToken} in the job's credentials,
 * else the job token's password). The MapReduce ApplicationMaster hands it to Hadoop's {@code mapreduce_shuffle}
 * service only, so this service reads it from the credentials the NodeManager wrote for one of the job's
 * containers ({@code container_tokens} in the container's directory, deleted when the container ends): the
 * maintenance thread looks for it while a container of the job started here in the last minute may run
 * ({@link #captureSecrets}), and once more when a reducer's connection names a job whose secret is still unknown
 * (never on the connection's thread). It is kept until the job stops.
 */
final class ServedJobs {
    private static final Logger LOG = LoggerFactory.getLogger(ServedJobs.class);
    static final String CONTAINER_TOKENS = "container_tokens";
    /** A credentials file larger than this is not read (a few tokens take a few KiB). */
    static final long MAX_TOKENS_BYTES = 1 << 20;
    private static final long SEARCH_AGAIN_NANOS = java.util.concurrent.TimeUnit.SECONDS.toNanos(10);
    /** How long after a container of a job started here its credentials are looked for. */
    private static final long CAPTURE_NANOS = java.util.concurrent.TimeUnit.SECONDS.toNanos(60);

    /** One job: its ids, the NodeManagers of this process that ran its containers, its secret once read. */
    static final class Job {
        final JobID jobId;
        final String appId;
        final String user;
        final int shuffleId;
        final Set<LocalDirs> on = ConcurrentHashMap.newKeySet();
        private volatile byte[] secret;
        /** Until when a search that found no credentials is not repeated (System.nanoTime), guarded by this. */
        private long searchAgainAt = System.nanoTime();
        /** Until when the maintenance thread looks for the credentials of a container started here (nanoTime). */
        private volatile long captureUntil;
        /** A connection named this job before its secret was known: the maintenance thread looks once more. */
        private volatile boolean searchRequested;
        /** When the maintenance thread next looks for a running container's credentials past the window. */
        private long nextLiveScan = System.nanoTime();
        /** Containers of the job started and not yet stopped on this process's NodeManagers. */
        private final AtomicInteger liveContainers = new AtomicInteger();
        /** Guarded by this: the job's map and reduce counts (0 until a reducer said), each map's registered output. */
        int numMaps;
        int numReduces;
        /** Set when the application stopped here: its table is gone and REGISTERs naming it are refused. */
        volatile boolean stopped;
        final Map<Integer, Registered> outputs = new HashMap<>();

        Job(JobID jobId, String appId, String user, int shuffleId) {
            this.jobId = jobId;
            this.appId = appId;
            this.user = user;
            this.shuffleId = shuffleId;
        }

        String realm() {
            return jobId.toString();
        }

        /** The first existing file {@code relative} (under the app's directory) names on its NodeManagers. */
        File find(String relative) {
            for (LocalDirs dirs : on) {
                File f = dirs.find(LocalDirs.appBase(user, appId) + "/" + relative);
                if (f != null) {
                    return f;
                }
            }
            return null;
        }
    }

    /**
     * A map attempt's output registered in its job's table, with its index file: the lengths reducers ask are in
     * the process's {@link IndexCache}, or read again from that file.
     */
    record Registered(int attempt, File index) {
    }

    private final Configuration conf;
    private final long captureNanos;
    private final long liveScanNanos;
    private final Map<String, Job> byRealm = new ConcurrentHashMap<>();
    private final Map<Integer, Job> byShuffle = new ConcurrentHashMap<>();
    private final AtomicInteger nextShuffleId = new AtomicInteger();

    ServedJobs(Configuration conf) {
        this(conf, CAPTURE_NANOS, SEARCH_AGAIN_NANOS);
    }

    /** With another capture window after each container start and another interval past it (tests: 0, 0). */
    ServedJobs(Configuration conf, long captureNanos, long liveScanNanos) {
        this.conf = conf;
        this.captureNanos = captureNanos;
        this.liveScanNanos = liveScanNanos;
    }

    /**
     * Notes that {@code dirs}' NodeManager starts a container of {@code app} for {@code user} ({@code container}
     * true; its credentials are looked for while it runs, see {@link #containerStopped}) or runs the application.
     */
    Job learn(ApplicationId app, String user, LocalDirs dirs, boolean container) {
        JobID jobId = new JobID(Long.toString(app.getClusterTimestamp()), app.getId());
        // Atomically with another NodeManager's stop of the same application (one process may run several).
        Job job = byRealm.compute(jobId.toString(), (r, known) -> {
            Job j = known;
            if (j == null) {
                j = new Job(jobId, app.toString(), user, nextShuffleId.getAndIncrement());
                byShuffle.put(j.shuffleId, j);
            }
            j.on.add(dirs);
            return j;
        });
        job.captureUntil = System.nanoTime() + captureNanos;
        if (container) {
            job.liveContainers.incrementAndGet();
        }
        return job;
    }

    /** A container of {@code app} stopped on a NodeManager of this process. */
    void containerStopped(ApplicationId app) {
        Job job = byRealm.get(new JobID(Long.toString(app.getClusterTimestamp()), app.getId()).toString());
        if (job != null) {
            job.liveContainers.updateAndGet(n -> Math.max(0, n - 1));
        }
    }

    /**
     * Reads the shuffle secret of every job that has none yet and started a container here lately, while its
     * containers still run: the NodeManager deletes a container's {@code container_tokens} when the container
     * ends, and a reducer may first connect long after this NodeManager's maps finished. On the maintenance
     * thread.
     */
    void captureSecrets() {
        long now = System.nanoTime();
        for (Job job : byRealm.values()) {
            // While a container of the job runs here (its credentials file exists only then; localization can
            // take longer than the window), for a while after one started, or once when a connection asked.
            // Past the window, a running container's application is looked at every liveScanNanos only: an
            // application that is not MapReduce (Spark, Tez) never has a shuffle secret and may run for hours.
            boolean inWindow = now - job.captureUntil < 0;
            boolean liveDue = job.liveContainers.get() > 0 && now - job.nextLiveScan >= 0;
            if (job.secret == null && (inWindow || liveDue || job.searchRequested)) {
                job.searchRequested = false;
                if (!inWindow) {
                    job.nextLiveScan = now + liveScanNanos;
                }
                byte[] s = findSecret(job);
                if (s != null) {
                    job.secret = s;
                }
            }
        }
    }

    /**
     * Notes that {@code app} stopped on {@code dirs}' NodeManager.
     *
     * @return the job when no NodeManager of this process holds it any more (the caller drops its table), or null
     */
    Job stopped(ApplicationId app, LocalDirs dirs) {
        JobID jobId = new JobID(Long.toString(app.getClusterTimestamp()), app.getId());
        Job[] dropped = new Job[1];
        byRealm.computeIfPresent(jobId.toString(), (r, job) -> {
            job.on.remove(dirs);
            if (!job.on.isEmpty()) {
                return job;
            }
            byShuffle.remove(job.shuffleId, job);
            dropped[0] = job;
            return null;
        });
        return dropped[0];
    }

    Job job(String realm) {
        return realm == null ? null : byRealm.get(realm);
    }

    /** The realm whose connections may READ {@code shuffleId}'s table. */
    String realmOf(int shuffleId) {
        Job j = byShuffle.get(shuffleId);
        // A table is only created for a known job; a realm no connection can have keeps any other one out.
        return j != null ? j.realm() : "-";
    }

    /** Whether {@code realm}'s secret is known already (without looking for it). */
    boolean hasSecret(String realm) {
        Job j = job(realm);
        return j != null && j.secret != null;
    }

    int size() {
        return byRealm.size();
    }

    /**
     * The shuffle secret of {@code realm}'s job, or null when this process serves no such job or cannot find its
     * credentials (the connection is refused). Runs on the node's transport thread while a peer connects.
     */
    byte[] secretOf(String realm) {
        Job job = job(realm);
        if (job == null) {
            return null;
        }
        byte[] s = job.secret;
        if (s == null) {
            // No disk is read here (this is the transport thread, and anyone may name any job): the maintenance
            // thread is asked to look, at most once per SEARCH_AGAIN; this connection is refused meanwhile.
            synchronized (job) {
                long now = System.nanoTime();
                if (now - job.searchAgainAt >= 0) {
                    job.searchAgainAt = now + SEARCH_AGAIN_NANOS;
                    job.searchRequested = true;
                    LOG.warn("rdma-shuffle: no credentials of job {} (application {}, user {}) captured yet: a"
                            + " connection for it is refused (its reducer fetches from here over HTTP); looking for"
                            + " them again", job.realm(), job.appId, job.user);
                }
            }
        }
        return s;
    }

    private byte[] findSecret(Job job) {
        for (LocalDirs dirs : job.on) {
            for (File appDir : dirs.findAll(LocalDirs.appBase(job.user, job.appId))) {
                File[] containers = appDir.listFiles((d, name) -> name.startsWith("container_"));
                if (containers == null) {
                    continue;
                }
                for (File c : containers) {
                    File tokens = new File(c, CONTAINER_TOKENS);
                    long length = LocalDirs.plainFileLength(tokens);
                    if (length < 0 || length > MAX_TOKENS_BYTES) {
                        continue; // not there, not a plain file, or larger than any credentials file
                    }
                    try {
                        Credentials creds = Credentials.readTokenStorageFile(new Path(tokens.getPath()), conf);
                        byte[] shuffle = TokenCache.getShuffleSecretKey(creds);
                        if (shuffle != null && shuffle.length > 0) {
                            return shuffle;
                        }
                        Token<?> jobToken = TokenCache.getJobToken(creds);
                        if (jobToken != null && jobToken.getPassword().length > 0) {
                            return jobToken.getPassword();
                        }
                    } catch (IOException | RuntimeException e) {
                        LOG.debug("rdma-shuffle: cannot read {} of job {}: {}", tokens, job.realm(), e.toString());
                    }
                }
            }
        }
        return null;
    }
}
