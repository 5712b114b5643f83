package org.rdmashuffle.examples;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.StageInfo;

/** Keeps each completed stage's duration and the task metrics the comparison reports. */
final class StageRecorder extends SparkListener {
    /** One completed stage, times in milliseconds, sizes in bytes. */
    record Stage(int id, String name, long durationMs, long bytesWritten, long remoteBytesRead, long localBytesRead,
                 long fetchWaitMs, long executorCpuMs, long gcMs) {
        boolean readsShuffle() {
            return remoteBytesRead + localBytesRead > 0;
        }
    }

    final List<Stage> stages = new CopyOnWriteArrayList<>();

    @Override
    public void onStageCompleted(SparkListenerStageCompleted e) {
        StageInfo s = e.stageInfo();
        TaskMetrics m = s.taskMetrics();
        if (m == null || s.submissionTime().isEmpty() || s.completionTime().isEmpty()) {
            return;
        }
        long duration = (Long) s.completionTime().get() - (Long) s.submissionTime().get();
        stages.add(new Stage(s.stageId(), s.name(), duration, m.shuffleWriteMetrics().bytesWritten(),
                m.shuffleReadMetrics().remoteBytesRead(), m.shuffleReadMetrics().localBytesRead(),
                m.shuffleReadMetrics().fetchWaitTime(), m.executorCpuTime() / 1_000_000, m.jvmGCTime()));
    }
}
