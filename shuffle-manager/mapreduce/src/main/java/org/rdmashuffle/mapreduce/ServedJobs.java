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
 * application stops on every such NodeManager. Each job is a realm of the node: its connections prove its shuffle
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
        /** The job's shuffle secret, from its token; never changed. */
        private final byte[] secret;
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
     * {@code secret}. A job keeps the secret it was first learnt with: another one later is logged and ignored
     * (a job's token does not change while it runs).
     */
    Job learn(ApplicationId app, String user, LocalDirs dirs, byte[] secret) {
        if (secret == null || secret.length == 0) {
            throw new IllegalArgumentException("no shuffle secret for " + app);
        }
        JobID jobId = new JobID(Long.toString(app.getClusterTimestamp()), app.getId());
        // Atomically with another NodeManager's stop of the same application (one process may run several).
        Job job = byRealm.compute(jobId.toString(), (r, known) -> {
            Job j = known;
            if (j == null) {
                j = new Job(jobId, app.toString(), user, nextShuffleId.getAndIncrement(), secret.clone());
                byShuffle.put(j.shuffleId, j);
            }
            j.on.add(dirs);
            return j;
        });
        if (!java.security.MessageDigest.isEqual(job.secret, secret)) {
            LOG.warn("rdma-shuffle: application {} initialized again with another job token: the first one's secret"
                    + " is kept", app);
        }
        return job;
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
