package org.rdmashuffle.mapreduce;

import java.io.IOException;
import javax.crypto.SecretKey;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.Reporter;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.task.reduce.ExceptionReporter;
import org.apache.hadoop.mapreduce.task.reduce.Fetcher;
import org.apache.hadoop.mapreduce.task.reduce.MapHost;
import org.apache.hadoop.mapreduce.task.reduce.MergeManager;
import org.apache.hadoop.mapreduce.task.reduce.ShuffleClientMetrics;
import org.apache.hadoop.mapreduce.task.reduce.ShuffleSchedulerImpl;

/**
 * Hadoop's own HTTP fetcher, never started as a thread: an {@link RdmaFetcher} hands it the hosts whose outputs
 * go over HTTP, and it fetches them exactly as Hadoop's shuffle does (URL signed with the job's shuffle secret,
 * retries, fetch failures reported to the scheduler).
 */
final class HttpFetcher<K, V> extends Fetcher<K, V> {
    HttpFetcher(JobConf job, TaskAttemptID reduceId, ShuffleSchedulerImpl<K, V> scheduler, MergeManager<K, V> merger,
                Reporter reporter, ShuffleClientMetrics metrics, ExceptionReporter exceptionReporter,
                SecretKey shuffleKey) {
        super(job, reduceId, scheduler, merger, reporter, metrics, exceptionReporter, shuffleKey);
    }

    /** Fetches every map output the scheduler knows on {@code host} now (the caller frees the host after). */
    void fetch(MapHost host) throws IOException {
        copyFromHost(host);
    }
}
