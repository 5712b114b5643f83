package org.rdmashuffle.mapreduce.jobs;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Collectors;
import org.apache.hadoop.mapreduce.Counters;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.TaskCompletionEvent;
import org.apache.hadoop.mapreduce.TaskCounter;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What a finished job left for a test: whether it succeeded, how long it took, its counters and its task
 * completion events (where each successful attempt ran, as the address of that node's shuffle server).
 *
 * <p>Counters and events are read as soon as the job ends, while the ApplicationMaster still answers (it stays up
 * about five seconds after the job); without a history server they could not be read later.
 */
public record JobResult(String name, JobID jobId, boolean succeeded, long elapsedMs, Counters counters,
        List<TaskCompletionEvent> completionEvents) {
    private static final Logger LOG = LoggerFactory.getLogger(JobResult.class);

    /** Submits {@code job}, waits for it and collects its result. */
    public static JobResult run(Job job) throws IOException, InterruptedException {
        long begin = System.nanoTime();
        boolean succeeded;
        try {
            succeeded = job.waitForCompletion(false);
        } catch (ClassNotFoundException e) {
            throw new IOException(e);
        }
        long elapsedMs = (System.nanoTime() - begin) / 1_000_000;
        Counters counters = job.getCounters();
        List<TaskCompletionEvent> events = new ArrayList<>();
        for (TaskCompletionEvent[] batch = job.getTaskCompletionEvents(0, 1000); batch.length > 0;
                batch = job.getTaskCompletionEvents(events.size(), 1000)) {
            events.addAll(Arrays.asList(batch));
        }
        if (counters == null || counters.getGroup(TaskCounter.class.getName()).size() == 0) {
            throw new IOException("Job " + job.getJobID() + " (" + job.getJobName() + ") ended but its counters"
                    + " could not be read: its ApplicationMaster had gone before the client asked");
        }
        JobResult result = new JobResult(job.getJobName(), job.getJobID(), succeeded, elapsedMs, counters,
                List.copyOf(events));
        LOG.info("Job {} ({}) {} in {} ms: {} map and {} reduce attempts succeeded; map outputs served by {}",
                result.name(), result.jobId(), succeeded ? "succeeded" : "FAILED", elapsedMs,
                result.succeededAttempts(true).size(), result.succeededAttempts(false).size(),
                result.mapOutputServers());
        return result;
    }

    /** The value of one counter. */
    public long counter(Enum<?> counter) {
        return counters.findCounter(counter).getValue();
    }

    /** The completion events of successful map ({@code maps}) or reduce attempts. */
    public List<TaskCompletionEvent> succeededAttempts(boolean maps) {
        return completionEvents.stream()
                .filter(e -> e.getStatus() == TaskCompletionEvent.Status.SUCCEEDED && e.isMapTask() == maps)
                .toList();
    }

    /** The distinct shuffle-server addresses ("http://host:port") that served this job's map outputs. */
    public List<String> mapOutputServers() {
        return succeededAttempts(true).stream().map(TaskCompletionEvent::getTaskTrackerHttp).distinct().sorted()
                .collect(Collectors.toList());
    }
}
