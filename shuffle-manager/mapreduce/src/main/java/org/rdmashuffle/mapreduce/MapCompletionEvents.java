package org.rdmashuffle.mapreduce;

import java.io.IOException;
import org.apache.hadoop.mapred.JobID;
import org.apache.hadoop.mapred.MapTaskCompletionEventsUpdate;
import org.apache.hadoop.mapred.TaskCompletionEvent;
import org.apache.hadoop.mapred.TaskUmbilicalProtocol;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.task.reduce.ExceptionReporter;
import org.apache.hadoop.mapreduce.task.reduce.ShuffleSchedulerImpl;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Asks the ApplicationMaster (over the task umbilical) for map completion events once a second, as Hadoop's
 * shuffle does, and hands each to the scheduler: a succeeded map becomes known on its host; an obsolete,
 * failed or killed attempt is withdrawn, so it is never fetched.
 */
final class MapCompletionEvents extends Thread {
    private static final Logger LOG = LoggerFactory.getLogger(MapCompletionEvents.class);
    private static final long POLL_MS = 1000;
    /** Failures in a row before the reducer fails, and the wait after each: Hadoop's EventFetcher's values. */
    private static final int MAX_FAILURES = 10;
    private static final long RETRY_MS = 5000;

    private final TaskAttemptID reduce;
    private final TaskUmbilicalProtocol umbilical;
    private final ShuffleSchedulerImpl<?, ?> scheduler;
    private final ExceptionReporter reporter;
    private final int maxEvents;
    private volatile boolean stopped;
    private int from;

    MapCompletionEvents(TaskAttemptID reduce, TaskUmbilicalProtocol umbilical, ShuffleSchedulerImpl<?, ?> scheduler,
                        ExceptionReporter reporter, int maxEvents) {
        super("rdma-shuffle-events-" + reduce);
        setDaemon(true);
        this.reduce = reduce;
        this.umbilical = umbilical;
        this.scheduler = scheduler;
        this.reporter = reporter;
        this.maxEvents = maxEvents;
    }

    @Override
    public void run() {
        int failures = 0;
        try {
            while (!stopped) {
                long wait = POLL_MS;
                try {
                    poll();
                    failures = 0;
                } catch (IOException e) {
                    if (++failures >= MAX_FAILURES) {
                        throw new IOException(failures + " failures in a row asking for map completion events", e);
                    }
                    LOG.info("rdma-shuffle: asking for map completion events failed ({} in a row): {}", failures,
                            e.toString());
                    wait = RETRY_MS;
                }
                Thread.sleep(wait);
            }
        } catch (InterruptedException e) {
            // stopped
        } catch (Throwable t) {
            reporter.reportException(t);
        }
    }

    /** Takes every event the ApplicationMaster has past the last one taken. */
    private void poll() throws IOException {
        TaskCompletionEvent[] events;
        do {
            MapTaskCompletionEventsUpdate update = umbilical.getMapCompletionEvents((JobID) reduce.getJobID(), from,
                    maxEvents, (org.apache.hadoop.mapred.TaskAttemptID) reduce);
            events = update.getMapTaskCompletionEvents();
            from += events.length;
            for (TaskCompletionEvent e : events) {
                scheduler.resolve(e);
            }
        } while (events.length == maxEvents && !stopped);
    }

    void shutDown() throws InterruptedException {
        stopped = true;
        interrupt();
        join(5000);
    }
}
