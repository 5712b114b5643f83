package org.rdmashuffle.mapreduce;

import java.io.File;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The MapReduce jobs a process's service knows: one per application a NodeManager of this process initialized
 * for the service with its job token (YARN does so for each container of the job it starts); forgotten when the
 * application stops, or the service stops, on every such NodeManager. Each job is a realm of the node: its connections prove its shuffle
 * secret, and its output table is READable by them only.
 *
 * <p>The shuffle secret is the password of the job token the MapReduce ApplicationMaster hands
 * {@code mapreduce_shuffle} (the job's {@code MapReduceShuffleToken}, else its job token's password: the secret
 * its tasks hold). It is kept in memory until the job stops; no file is read for it.
 */
final class ServedJobs {
    private static final Logger LOG = LoggerFactory.getLogger(ServedJobs.class);

    /** One job: its ids, its secret, the NodeManagers of this process that run it. */
    static final class Job {
        final JobID jobId;
        final String appId;
        final String user;
        final int shuffleId;
        /**
         * The job's shuffle secret, from its token; replaced only while it came from the {@link JobSecretStore}
         * alone (a token handed by YARN is newer than what a service kept before its restart). Written under the
         * job's entry's compute in {@link ServedJobs}.
         */
        private volatile byte[] secret;
        /** Whether {@link #secret} was read back from the store and no token of YARN has been handed since. */
        private boolean secretKeptOnly;
        final Set<LocalDirs> on = ConcurrentHashMap.newKeySet();
        /** Guarded by this: the job's map and reduce counts (0 until a reducer said), each map's registered output. */
        int numMaps;
        int numReduces;
        /** Set when the application stopped here: its table is gone and REGISTERs naming it are refused. */
        volatile boolean stopped;
        final Map<Integer, Registered> outputs = new HashMap<>();

        Job(JobID jobId, String appId, String user, int shuffleId, byte[] secret) {
            this.jobId = jobId;
            this.appId = appId;
            this.user = user;
            this.shuffleId = shuffleId;
            this.secret = secret;
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

    private final Map<String, Job> byRealm = new ConcurrentHashMap<>();
    private final Map<Integer, Job> byShuffle = new ConcurrentHashMap<>();
    private final AtomicInteger nextShuffleId = new AtomicInteger();

    /**
     * Notes that {@code dirs}' NodeManager runs {@code app} for {@code user}, the password of its job token being
     * {@code secret}. A job keeps the secret of the first token handed: another one later is logged and ignored
     * (a job's token does not change while it runs). A secret known only from the store ({@link #recovered}) is
     * replaced by the token's.
     */
    Job learn(ApplicationId app, String user, LocalDirs dirs, byte[] secret) {
        return learn(app, user, dirs, secret, false);
    }

    /**
     * Notes that {@code dirs}' NodeManager ran {@code app} before its service restarted, with the secret the
     * {@link JobSecretStore} kept: until a job token of {@code app} is handed ({@link #learn}, which then replaces
     * it), that secret is the job's.
     */
    Job recovered(ApplicationId app, String user, LocalDirs dirs, byte[] secret) {
        return learn(app, user, dirs, secret, true);
    }

    private Job learn(ApplicationId app, String user, LocalDirs dirs, byte[] secret, boolean kept) {
        if (secret == null || secret.length == 0) {
            throw new IllegalArgumentException("no shuffle secret for " + app);
        }
        JobID jobId = new JobID(Long.toString(app.getClusterTimestamp()), app.getId());
        boolean[] ignored = new boolean[1];
        // Atomically with another NodeManager's stop of the same application (one process may run several).
        Job job = byRealm.compute(jobId.toString(), (r, known) -> {
            Job j = known;
            if (j == null) {
                j = new Job(jobId, app.toString(), user, nextShuffleId.getAndIncrement(), secret.clone());
                j.secretKeptOnly = kept;
                byShuffle.put(j.shuffleId, j);
            } else if (!java.security.MessageDigest.isEqual(j.secret, secret)) {
                if (j.secretKeptOnly && !kept) {
                    j.secret = secret.clone(); // YARN's token is newer than the kept one
                } else {
                    ignored[0] = true;
                }
            }
            if (!kept) {
                j.secretKeptOnly = false;
            }
            j.on.add(dirs);
            return j;
        });
        if (ignored[0]) {
            LOG.warn("rdma-shuffle: application {} initialized again with another job token: the first one's secret"
                    + " is kept", app);
        }
        return job;
    }

    /**
     * Forgets {@code dirs}' NodeManager in every job (its service stopped: a service started again holds other
     * dirs).
     *
     * @return the jobs no NodeManager of this process holds any more (the caller drops their tables, as at a stop)
     */
    java.util.List<Job> forget(LocalDirs dirs) {
        java.util.List<Job> dropped = new java.util.ArrayList<>();
        for (String realm : byRealm.keySet()) {
            byRealm.computeIfPresent(realm, (r, job) -> {
                if (!job.on.remove(dirs) || !job.on.isEmpty()) {
                    return job;
                }
                byShuffle.remove(job.shuffleId, job);
                dropped.add(job);
                return null;
            });
        }
        return dropped;
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

    /** Whether {@code realm}'s job, and so its secret, is known here. */
    boolean hasSecret(String realm) {
        return job(realm) != null;
    }

    int size() {
        return byRealm.size();
    }

    /**
     * The shuffle secret of {@code realm}'s job, or null when this process serves no such job (the connection is
     * refused). Runs on the node's transport thread while a peer connects: answered from memory.
     */
    byte[] secretOf(String realm) {
        Job job = job(realm);
        return job == null ? null : job.secret;
    }
}
