package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import javax.crypto.spec.SecretKeySpec;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.Reporter;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.task.reduce.MapHost;
import org.junit.jupiter.api.Test;

/**
 * {@link HttpFetcher} reaches Hadoop's own {@code Fetcher} on this Hadoop line (package-private before 3.4, so by
 * reflection): it builds one and its {@code fetch} runs Hadoop's {@code copyFromHost} with the host given, whose
 * first act is to ask the scheduler for the host's maps (none here, so that call fails inside Hadoop's code).
 */
class HttpFetcherTest {
    @Test
    void shouldRunHadoopsCopyFromHostWithTheHostWhenFetching() {
        HttpFetcher<Object, Object> fetcher = new HttpFetcher<>(new JobConf(),
                TaskAttemptID.forName("attempt_1_0001_r_000000_0"), null, null, Reporter.NULL, null, null,
                new SecretKeySpec(new byte[] {1, 2, 3, 4}, "HmacSHA1"));
        NullPointerException e = assertThrows(NullPointerException.class,
                () -> fetcher.fetch(new MapHost("localhost:1", "http://localhost:1/mapOutput")));
        StackTraceElement top = e.getStackTrace()[0];
        assertEquals("org.apache.hadoop.mapreduce.task.reduce.Fetcher", top.getClassName(), e.toString());
        assertEquals("copyFromHost", top.getMethodName(), e.toString());
    }
}
