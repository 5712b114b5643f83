package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import javax.crypto.SecretKey;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.Reporter;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.task.reduce.ExceptionReporter;
import org.apache.hadoop.mapreduce.task.reduce.MapHost;
import org.apache.hadoop.mapreduce.task.reduce.MergeManager;
import org.apache.hadoop.mapreduce.task.reduce.ShuffleClientMetrics;
import org.apache.hadoop.mapreduce.task.reduce.ShuffleSchedulerImpl;

/**
 * Hadoop's own HTTP fetcher ({@code org.apache.hadoop.mapreduce.task.reduce.Fetcher}), never started as a thread:
 * an {@link RdmaFetcher} hands it the hosts whose outputs go over HTTP, and it fetches them exactly as Hadoop's
 * shuffle does (URL signed with the job's shuffle secret, retries, fetch failures reported to the scheduler).
 *
 * <p>Reached through reflection because {@code Fetcher} is package-private before Hadoop 3.4 (public since): one
 * source for every Hadoop line. Called once per host that goes to HTTP, never per READ.
 */
final class HttpFetcher<K, V> {
    private static final String FETCHER = "org.apache.hadoop.mapreduce.task.reduce.Fetcher";
    private static final Constructor<?> NEW_FETCHER;
    private static final Method COPY_FROM_HOST;

    static {
        try {
            Class<?> fetcher = Class.forName(FETCHER, false, ShuffleSchedulerImpl.class.getClassLoader());
            NEW_FETCHER = fetcher.getDeclaredConstructor(JobConf.class, TaskAttemptID.class,
                    ShuffleSchedulerImpl.class, MergeManager.class, Reporter.class, ShuffleClientMetrics.class,
                    ExceptionReporter.class, SecretKey.class);
            NEW_FETCHER.setAccessible(true);
            COPY_FROM_HOST = fetcher.getDeclaredMethod("copyFromHost", MapHost.class);
            COPY_FROM_HOST.setAccessible(true);
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new ExceptionInInitializerError(new IllegalStateException("this Hadoop's " + FETCHER
                    + " lacks the constructor or copyFromHost(MapHost) that Hadoop 3.3 to 3.5 have", e));
        }
    }

    private final Thread fetcher;

    HttpFetcher(JobConf job, TaskAttemptID reduceId, ShuffleSchedulerImpl<K, V> scheduler, MergeManager<K, V> merger,
                Reporter reporter, ShuffleClientMetrics metrics, ExceptionReporter exceptionReporter,
                SecretKey shuffleKey) {
        try {
            fetcher = (Thread) NEW_FETCHER.newInstance(job, reduceId, scheduler, merger, reporter, metrics,
                    exceptionReporter, shuffleKey);
        } catch (InvocationTargetException e) {
            throw rethrown(e.getCause());
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot create Hadoop's " + FETCHER, e);
        }
    }

    /** Fetches every map output the scheduler knows on {@code host} now (the caller frees the host after). */
    void fetch(MapHost host) throws IOException {
        try {
            COPY_FROM_HOST.invoke(fetcher, host);
        } catch (InvocationTargetException e) {
            if (e.getCause() instanceof IOException io) {
                throw io;
            }
            throw rethrown(e.getCause());
        } catch (IllegalAccessException e) {
            throw new IllegalStateException("cannot call " + FETCHER + ".copyFromHost", e);
        }
    }

    private static RuntimeException rethrown(Throwable cause) {
        if (cause instanceof RuntimeException r) {
            return r;
        }
        if (cause instanceof Error error) {
            throw error;
        }
        return new IllegalStateException(FETCHER + " failed", cause);
    }
}
