package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapred.IndexRecord;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.SpillRecord;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.ConfigException;

/** The service's bounded index memory and its memory of outputs that are not here. */
class IndexCacheTest {
    private static final String USER = "carol";

    @TempDir
    Path dir;

    private ServedJobs.Job job(int appNumber) {
        Configuration c = new Configuration(false);
        c.set(MapReduceRdmaConf.NM_LOCAL_DIRS, dir.toString());
        return new ServedJobs().learn(ApplicationId.newInstance(1_700_000_000_000L, appNumber), USER,
                new LocalDirs(null, c), "secret".getBytes());
    }

    private Path outputDir(ServedJobs.Job job, TaskAttemptID attempt) {
        return dir.resolve(LocalDirs.appBase(USER, job.appId)).resolve("output").resolve(attempt.toString());
    }

    private static TaskAttemptID attempt(ServedJobs.Job job, int map, int attempt) {
        return new TaskAttemptID(new TaskID(job.jobId, TaskType.MAP, map), attempt);
    }

    /** An index of {@code reduces} partitions whose lengths name the map and the partition. */
    private File writeIndex(ServedJobs.Job job, int map, int reduces) throws IOException {
        Path out = outputDir(job, attempt(job, map, 0));
        Files.createDirectories(out);
        SpillRecord index = new SpillRecord(reduces);
        long at = 0;
        for (int p = 0; p < reduces; p++) {
            long len = 1000L * map + p;
            index.putIndex(new IndexRecord(at, len * 2, len), p);
            at += len;
        }
        Files.write(out.resolve("file.out"), new byte[(int) at]);
        File f = out.resolve("file.out.index").toFile();
        index.writeToFile(new org.apache.hadoop.fs.Path(f.getPath()), new JobConf());
        return f;
    }

    @Test
    void shouldKeepHeldBytesUnderTheLimitAndReadDroppedIndexesAgainWhenManyMapsOfManyReducesRegister()
            throws Exception {
        int maps = 40;
        int reduces = 50; // 1,200 bytes per index, 48,000 in all
        long limit = 10_000;
        IndexCache cache = new IndexCache(limit);
        ServedJobs.Job job = job(1);
        File[] files = new File[maps];
        for (int m = 0; m < maps; m++) {
            files[m] = writeIndex(job, m, reduces);
            IndexCache.Key key = new IndexCache.Key(job.shuffleId, m, 0);
            IndexCache.Located at = cache.locate(job, attempt(job, m, 0), key);
            assertNotNull(at);
            cache.put(key, cache.read(at, reduces));
            assertTrue(cache.heldBytes() <= limit, cache.heldBytes() + " > " + limit);
        }
        assertEquals(8 * reduces * ShuffleServer.INDEX_RECORD_BYTES, cache.heldBytes(), "eight whole indexes fit");
        long reads = cache.indexReads();
        for (int m = 0; m < maps; m++) {
            SpillRecord s = cache.get(new IndexCache.Key(job.shuffleId, m, 0),
                    IndexCache.Located.of(files[m], IndexCache.attemptDir(job, attempt(job, m, 0))), reduces);
            for (int p = 0; p < reduces; p++) {
                assertEquals(1000L * m + p, s.getIndex(p).partLength);
                assertEquals(2 * (1000L * m + p), s.getIndex(p).rawLength);
            }
            assertTrue(cache.heldBytes() <= limit);
        }
        assertEquals(reads + maps, cache.indexReads(), "every dropped index read again from its file");
        cache.dropJob(job.shuffleId);
        assertEquals(0, cache.heldBytes());
        assertEquals(0, cache.heldIndexes());
    }

    @Test
    void shouldNotAnswerFromAnIndexFileThatChangedAfterItWasDropped() throws Exception {
        IndexCache cache = new IndexCache(0); // holds nothing: every ask reads the file
        ServedJobs.Job job = job(2);
        File index = writeIndex(job, 0, 4);
        Files.write(index.toPath(), new byte[3]);
        assertThrows(IOException.class, () -> cache.get(new IndexCache.Key(job.shuffleId, 0, 0),
                IndexCache.Located.of(index, IndexCache.attemptDir(job, attempt(job, 0, 0))), 4));
    }

    @Test
    void shouldRememberAMissingOutputForASecondThenLookAgainAndForgetItWithItsJob() throws Exception {
        AtomicLong now = new AtomicLong();
        IndexCache cache = new IndexCache(1 << 20, now::get);
        ServedJobs.Job job = job(3);
        IndexCache.Key key = new IndexCache.Key(job.shuffleId, 0, 0);
        assertNull(cache.locate(job, attempt(job, 0, 0), key));
        assertNull(cache.locate(job, attempt(job, 0, 0), key));
        assertEquals(1, cache.lookups(), "the second ask read no disk");
        // Another attempt of the same map is its own answer: a rerun is never hidden by its predecessor's.
        writeIndex(job, 0, 2); // attempt 0's files appear (only a reducer asking early sees this)
        assertNull(cache.locate(job, attempt(job, 0, 0), key), "still believed missing within the second");
        now.addAndGet(IndexCache.MISSING_NANOS);
        assertNotNull(cache.locate(job, attempt(job, 0, 0), key), "looked again after the second");
        assertEquals(2, cache.lookups());
        IndexCache.Key other = new IndexCache.Key(job.shuffleId, 1, 0);
        assertNull(cache.locate(job, attempt(job, 1, 0), other));
        cache.dropJob(job.shuffleId);
        assertNull(cache.locate(job, attempt(job, 1, 0), other));
        assertEquals(4, cache.lookups(), "a stopped job's answers are forgotten");
    }

    @Test
    void shouldReadTheIndexCacheLimitAsASizeAndRefuseBadValuesNamingTheKey() {
        Configuration c = new Configuration(false);
        assertEquals(10L << 20, MapReduceRdmaConf.indexCacheMaxBytes(c));
        c.set(MapReduceRdmaConf.INDEX_CACHE_MAX_BYTES, "512k");
        assertEquals(512L << 10, MapReduceRdmaConf.indexCacheMaxBytes(c));
        c.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
        MapReduceRdmaConf.from(c); // the transport's keys are not confused by it
        for (String bad : new String[] {"-1", "lots"}) {
            c.set(MapReduceRdmaConf.INDEX_CACHE_MAX_BYTES, bad);
            ConfigException e = assertThrows(ConfigException.class, () -> MapReduceRdmaConf.from(c));
            assertTrue(e.getMessage().contains(MapReduceRdmaConf.INDEX_CACHE_MAX_BYTES), e.getMessage());
        }
    }
}
