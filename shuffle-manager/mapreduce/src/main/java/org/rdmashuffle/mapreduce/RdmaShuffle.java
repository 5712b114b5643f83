package org.rdmashuffle.mapreduce;

import java.io.IOException;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.RawKeyValueIterator;
import org.apache.hadoop.mapred.ReduceTask;
import org.apache.hadoop.mapred.Reporter;
import org.apache.hadoop.mapred.ShuffleConsumerPlugin;
import org.apache.hadoop.mapred.Task;
import org.apache.hadoop.mapred.TaskStatus;
import org.apache.hadoop.mapred.TaskUmbilicalProtocol;
import org.apache.hadoop.mapreduce.MRConfig;
import org.apache.hadoop.mapreduce.MRJobConfig;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.task.reduce.ExceptionReporter;
import org.apache.hadoop.mapreduce.task.reduce.MergeManager;
import org.apache.hadoop.mapreduce.task.reduce.MergeManagerImpl;
import org.apache.hadoop.mapreduce.task.reduce.Shuffle;
import org.apache.hadoop.mapreduce.task.reduce.ShuffleClientMetrics;
import org.apache.hadoop.mapreduce.task.reduce.ShuffleSchedulerImpl;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The reduce side of rdma-shuffle for MapReduce ({@code mapreduce.job.reduce.shuffle.consumer.plugin.class}):
 * Hadoop's scheduler and merge manager, map completion events from the ApplicationMaster as Hadoop's shuffle
 * takes them, and {@link RdmaFetcher} threads that READ each map's partition from the NodeManager's
 * {@link RdmaShuffleHandler} — or fetch it with Hadoop's HTTP fetcher where there is no such service.
 *
 * <p>A job with encrypted intermediate data ({@code mapreduce.job.encrypted-intermediate-data}) is shuffled by
 * Hadoop's own {@link Shuffle} entirely (one WARN): its map outputs are encrypted streams that Hadoop's fetcher
 * decrypts as it reads them, and this plugin does not decrypt.
 */
public class RdmaShuffle<K, V> implements ShuffleConsumerPlugin<K, V>, ExceptionReporter {
    private static final Logger LOG = LoggerFactory.getLogger(RdmaShuffle.class);
    private static final int PROGRESS_MS = 2000;

    private Context<K, V> context;
    private Shuffle<K, V> hadoops;
    private TaskAttemptID reduceId;
    private JobConf jobConf;
    private Reporter reporter;
    private ShuffleClientMetrics metrics;
    private TaskUmbilicalProtocol umbilical;
    private ShuffleSchedulerImpl<K, V> scheduler;
    private MergeManager<K, V> merger;
    private RdmaShuffleConf rdma;
    private ReducerClient client;
    private final ShuffleTimes times = new ShuffleTimes();
    private int threads;
    private Throwable failure;
    private String failingThread;

    @Override
    public void init(Context<K, V> context) {
        this.context = context;
        this.jobConf = context.getJobConf();
        String hadoopsWhy = null;
        if (jobConf.getBoolean(MRJobConfig.MR_ENCRYPTED_INTERMEDIATE_DATA, false)) {
            hadoopsWhy = "it encrypts its intermediate data (" + MRJobConfig.MR_ENCRYPTED_INTERMEDIATE_DATA + "=true)";
        } else if (jobConf.getBoolean(MRConfig.SHUFFLE_SSL_ENABLED_KEY, MRConfig.SHUFFLE_SSL_ENABLED_DEFAULT)) {
            hadoopsWhy = "the cluster's shuffle is encrypted (" + MRConfig.SHUFFLE_SSL_ENABLED_KEY + "=true) and READs"
                    + " over tcp are not";
        }
        if (hadoopsWhy != null) {
            LOG.warn("rdma-shuffle: job {} is shuffled by Hadoop's own shuffle: {}", context.getReduceId().getJobID(),
                    hadoopsWhy);
            hadoops = new Shuffle<>();
            hadoops.init(context);
            return;
        }
        this.rdma = MapReduceRdmaConf.from(jobConf); // bad settings fail the task, saying which
        this.reduceId = context.getReduceId();
        this.reporter = context.getReporter();
        this.umbilical = context.getUmbilical();
        this.metrics = ShuffleClientMetrics.create(reduceId, jobConf);
        this.threads = Math.max(1, jobConf.getInt(MRJobConfig.SHUFFLE_PARALLEL_COPIES, 5));
        this.scheduler = new ShuffleSchedulerImpl<>(jobConf, context.getStatus(), reduceId, this,
                context.getCopyPhase(), context.getShuffledMapsCounter(), context.getReduceShuffleBytes(),
                context.getFailedShuffleCounter());
        this.merger = new MergeManagerImpl<>(reduceId, jobConf, context.getLocalFS(), context.getLocalDirAllocator(),
                reporter, context.getCodec(), context.getCombinerClass(), context.getCombineCollector(),
                context.getSpilledRecordsCounter(), context.getReduceCombineInputCounter(),
                context.getMergedMapOutputsCounter(), this, context.getMergePhase(), context.getMapOutputFile());
    }

    @Override
    public RawKeyValueIterator run() throws IOException, InterruptedException {
        if (hadoops != null) {
            return hadoops.run();
        }
        long start = System.currentTimeMillis();
        String problem = null;
        long opening = System.nanoTime();
        try {
            client = new ReducerClient(rdma, reduceId.getJobID().toString(),
                    context.getReduceTask().getShuffleSecret().getEncoded());
        } catch (IOException | RuntimeException e) {
            problem = "this task's transport node cannot be opened: " + e.getMessage();
            LOG.warn("rdma-shuffle: every map output is fetched with Hadoop's HTTP shuffle: {}", problem, e);
        }
        times.opening(System.nanoTime() - opening);
        int maxEvents = Math.max(100, Math.min(10_000, 3_000_000 / Math.max(1, numReduces())));
        MapCompletionEvents events = new MapCompletionEvents(reduceId, umbilical, scheduler, this, maxEvents);
        events.start();
        @SuppressWarnings("unchecked")
        RdmaFetcher<K, V>[] fetchers = new RdmaFetcher[threads];
        for (int i = 0; i < threads; i++) {
            fetchers[i] = new RdmaFetcher<>(this, i, client, problem);
            fetchers[i].start();
        }
        try {
            while (!scheduler.waitUntilDone(PROGRESS_MS)) {
                reporter.progress();
                throwIfFailed();
            }
        } finally {
            events.shutDown();
            for (RdmaFetcher<K, V> f : fetchers) {
                f.shutDown();
            }
            scheduler.close();
            if (client != null) {
                reporter.incrCounter(RdmaShuffleCounter.HOSTS_VIA_HTTP, client.hostsViaHttp());
                // Every fetched partition is in the merge manager's memory or on disk now: the node, its
                // connections to every NodeManager and the pool's direct memory go before the reduce runs.
                closeClient();
            }
            long took = System.currentTimeMillis() - start;
            reporter.incrCounter(RdmaShuffleCounter.SHUFFLE_MILLIS, took);
            times.count(reporter);
            LOG.info("rdma-shuffle: {} shuffled in {} ms: {}", reduceId, took, times);
        }
        throwIfFailed();
        context.getCopyPhase().complete();
        TaskStatus status = context.getStatus();
        status.setPhase(TaskStatus.Phase.SORT);
        context.getReduceTask().statusUpdate(umbilical);
        RawKeyValueIterator kv;
        try {
            kv = merger.close();
        } catch (Throwable t) {
            throw new IOException("rdma-shuffle: the final merge failed", t);
        }
        throwIfFailed();
        return kv;
    }

    private synchronized void throwIfFailed() throws IOException {
        if (failure != null) {
            throw new IOException("rdma-shuffle: shuffle failed in " + failingThread, failure);
        }
    }

    @Override
    public void close() {
        if (hadoops != null) {
            hadoops.close();
        }
        closeClient();
    }

    private synchronized void closeClient() {
        ReducerClient c = client;
        client = null;
        if (c != null) {
            c.close();
        }
    }

    /** Keeps the first failure and wakes {@link #run}; never holds this while taking the scheduler's lock. */
    @Override
    public void reportException(Throwable t) {
        synchronized (this) {
            if (failure != null) {
                return;
            }
            failure = t;
            failingThread = Thread.currentThread().getName();
        }
        synchronized (scheduler) {
            scheduler.notifyAll();
        }
    }

    HttpFetcher<K, V> newHttpFetcher() {
        Task task = context.getReduceTask();
        return new HttpFetcher<>(jobConf, reduceId, scheduler, merger, reporter, metrics, this,
                task.getShuffleSecret());
    }

    ShuffleTimes times() {
        return times;
    }

    ShuffleSchedulerImpl<K, V> scheduler() {
        return scheduler;
    }

    MergeManager<K, V> merger() {
        return merger;
    }

    ShuffleClientMetrics metrics() {
        return metrics;
    }

    Reporter reporter() {
        return reporter;
    }

    int reduce() {
        return reduceId.getTaskID().getId();
    }

    int numReduces() {
        return jobConf.getNumReduceTasks();
    }

    int numMaps() {
        return ((ReduceTask) context.getReduceTask()).getNumMaps();
    }

    int fetcherThreads() {
        return threads;
    }
}
