package org.rdmashuffle.shuffle;

import java.io.File;
import java.io.IOException;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.shuffle.IndexShuffleBlockResolver;
import org.apache.spark.shuffle.ShuffleBlockResolver;
import org.apache.spark.shuffle.ShuffleHandle;
import org.apache.spark.shuffle.ShuffleManager;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.shuffle.ShuffleReader;
import org.apache.spark.shuffle.ShuffleWriteMetricsReporter;
import org.apache.spark.shuffle.ShuffleWriter;
import org.apache.spark.shuffle.sort.SortShuffleManager;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A Spark shuffle whose reducers pull map outputs with one-sided RDMA READs. Enable with
 * {@code spark.shuffle.manager=org.rdmashuffle.shuffle.RdmaShuffleManager}. Writing is Spark's sort
 * shuffle; each committed map output is registered as memory regions; readers fetch with READs.
 * Everything starts lazily (the driver builds this before its BlockManager is initialised).
 */
public final class RdmaShuffleManager implements ShuffleManager {
    private static final Logger LOG = LoggerFactory.getLogger(RdmaShuffleManager.class);

    private final SparkConf sparkConf;
    private final boolean isDriver;
    private final RdmaShuffleConf conf;
    private final SortShuffleManager sort;
    private volatile ExecutorRuntime runtime;
    private volatile boolean directoryStarted;
    private volatile boolean stopped;

    public RdmaShuffleManager(SparkConf sparkConf, boolean isDriver) {
        this.sparkConf = sparkConf;
        this.isDriver = isDriver;
        this.conf = SparkRdmaConf.from(sparkConf);
        this.sort = new SortShuffleManager(sparkConf);
    }

    private void ensureDirectory() {
        if (isDriver && !directoryStarted) {
            synchronized (this) {
                if (!directoryStarted) {
                    NodeDirectory.Endpoint.start(SparkEnv.get().rpcEnv());
                    directoryStarted = true;
                }
            }
        }
    }

    ExecutorRuntime runtime() {
        ExecutorRuntime rt = runtime;
        if (rt != null) {
            return rt;
        }
        synchronized (this) {
            if (runtime == null) {
                if (stopped) {
                    throw new IllegalStateException("rdma-shuffle is stopped");
                }
                ensureDirectory();
                try {
                    runtime = new ExecutorRuntime(conf, SparkEnv.get());
                } catch (IOException e) {
                    throw new IllegalStateException("rdma-shuffle cannot start its transport: " + e.getMessage(), e);
                }
            }
            return runtime;
        }
    }

    File dataFile(int shuffleId, long mapId) {
        return ((IndexShuffleBlockResolver) sort.shuffleBlockResolver()).getDataFile(shuffleId, mapId);
    }

    @Override
    public <K, V, C> ShuffleHandle registerShuffle(int shuffleId, ShuffleDependency<K, V, C> dependency) {
        ensureDirectory();
        return new RdmaShuffleHandle(sort.registerShuffle(shuffleId, dependency), dependency.rdd().getNumPartitions());
    }

    @Override
    public <K, V> ShuffleWriter<K, V> getWriter(ShuffleHandle handle, long mapId, TaskContext context,
                                                ShuffleWriteMetricsReporter metrics) {
        RdmaShuffleHandle h = (RdmaShuffleHandle) handle;
        return new RdmaShuffleWriter<>(sort.getWriter(h.sortHandle(), mapId, context, metrics), this, h, mapId,
                context.partitionId());
    }

    @Override
    public <K, C> ShuffleReader<K, C> getReader(ShuffleHandle handle, int startMapIndex, int endMapIndex,
                                                int startPartition, int endPartition, TaskContext context,
                                                ShuffleReadMetricsReporter metrics) {
        return new RdmaShuffleReader<>(this, (RdmaShuffleHandle) handle, startMapIndex, endMapIndex, startPartition,
                endPartition, context, metrics);
    }

    @Override
    public boolean unregisterShuffle(int shuffleId) {
        ExecutorRuntime rt = runtime;
        if (rt != null) {
            rt.unregisterShuffle(shuffleId);
        }
        return sort.unregisterShuffle(shuffleId);
    }

    @Override
    public ShuffleBlockResolver shuffleBlockResolver() {
        return sort.shuffleBlockResolver();
    }

    @Override
    public void stop() {
        synchronized (this) {
            stopped = true;
            if (runtime != null) {
                runtime.close();
                runtime = null;
            }
        }
        sort.stop();
        LOG.debug("rdma-shuffle stopped");
    }
}
