package org.rdmashuffle.examples;

import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.StageInfo;

/**
 * Stages and tasks by the phase the driver named in the local property {@link #PHASE} when it
 * submitted them ({@code map}, {@code reduce}): where each task ran and what it read, so a benchmark
 * can check that its tasks ran where it pinned them and report the reduce stage alone.
 */
final class PhaseRecorder extends SparkListener {
    static final String PHASE = "rdmashuffle.bench.phase";

    /** One finished task; times in milliseconds, sizes in bytes. */
    record Task(String phase, int stageId, int index, String executorId, String host, boolean successful, long runMs, long cpuMs,
                long remoteBytes, long localBytes, long remoteBlocks, long localBlocks, long fetchWaitMs) {
    }

    /** One completed stage. */
    record Stage(String phase, int stageId, int attempt, long durationMs) {
    }

    private final Map<Integer, String> phaseOfStage = new ConcurrentHashMap<>();
    final List<Task> tasks = new CopyOnWriteArrayList<>();
    final List<Stage> stages = new CopyOnWriteArrayList<>();

    @Override
    public void onStageSubmitted(SparkListenerStageSubmitted e) {
        String phase = e.properties() == null ? null : e.properties().getProperty(PHASE);
        phaseOfStage.put(e.stageInfo().stageId(), phase == null ? "" : phase);
    }

    @Override
    public void onTaskEnd(SparkListenerTaskEnd e) {
        TaskMetrics m = e.taskMetrics();
        String phase = phaseOfStage.getOrDefault(e.stageId(), "");
        boolean ok = e.taskInfo().successful();
        if (m == null) {
            tasks.add(new Task(phase, e.stageId(), e.taskInfo().index(), e.taskInfo().executorId(), e.taskInfo().host(), ok, 0, 0, 0, 0, 0, 0,
                    0));
            return;
        }
        var r = m.shuffleReadMetrics();
        tasks.add(new Task(phase, e.stageId(), e.taskInfo().index(), e.taskInfo().executorId(), e.taskInfo().host(), ok,
                m.executorRunTime(), m.executorCpuTime() / 1_000_000, r.remoteBytesRead(), r.localBytesRead(),
                r.remoteBlocksFetched(), r.localBlocksFetched(), r.fetchWaitTime()));
    }

    @Override
    public void onStageCompleted(SparkListenerStageCompleted e) {
        StageInfo s = e.stageInfo();
        if (s.submissionTime().isEmpty() || s.completionTime().isEmpty()) {
            return;
        }
        long d = (Long) s.completionTime().get() - (Long) s.submissionTime().get();
        stages.add(new Stage(phaseOfStage.getOrDefault(s.stageId(), ""), s.stageId(), s.attemptNumber(), d));
    }

    /** Sum of the durations of the phase's stages (one stage per phase in these benchmarks). */
    long stageMs(String phase) {
        return stages.stream().filter(s -> s.phase().equals(phase)).mapToLong(Stage::durationMs).sum();
    }

    /** Stage attempts of the phase beyond the first of each stage (retries after fetch failures). */
    long retries(String phase) {
        return stages.stream().filter(s -> s.phase().equals(phase) && s.attempt() > 0).count();
    }

    List<Task> tasks(String phase) {
        return tasks.stream().filter(t -> t.phase().equals(phase)).toList();
    }

    /** Executors the phase's tasks ran on. */
    Set<String> executors(String phase) {
        Set<String> s = new TreeSet<>();
        tasks(phase).forEach(t -> s.add(t.executorId()));
        return s;
    }
}
