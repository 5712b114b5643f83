package org.rdmashuffle.mapreduce;

import java.io.File;
import java.io.IOException;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.SpillRecord;
import org.apache.hadoop.mapreduce.TaskAttemptID;

/**
 * The map outputs' indexes a process's service holds, for every job together: at most
 * {@link MapReduceRdmaConf#INDEX_CACHE_MAX_BYTES} bytes of index records (24 bytes per reduce per map, as Hadoop's
 * {@code mapreduce.shuffle.index.cache.limit.bytes} counts them), the least recently used dropped first and read
 * again from its file when a reducer asks for it later.
 *
 * <p>It also remembers, for {@link #MISSING_NANOS}, that an attempt's output is not on this NodeManager, so a
 * reducer asking again and again (one REGISTER per retry) reads no disk each time. Why a short time is safe: a
 * reducer names an attempt only after its completion event, and the map wrote its output before it reported
 * done, so an output that is not there when asked does not appear later; the time only bounds what a disk that
 * was briefly unreadable, or a reducer that asked early, costs. Kept per attempt (a rerun is a new attempt, never
 * hidden by its predecessor's answer), at most {@link #MAX_MISSING} entries, dropped with the job.
 *
 * <p>Thread-safe; no disk is read under its lock.
 */
final class IndexCache {
    /** How long "not on this NodeManager" is believed without looking again. */
    static final long MISSING_NANOS = TimeUnit.SECONDS.toNanos(1);
    /** Attempts remembered as missing at most (the oldest forgotten first). */
    static final int MAX_MISSING = 4096;

    /** One map attempt of one job's table. */
    record Key(int shuffleId, int map, int attempt) {
    }

    /** An attempt's files on this NodeManager. */
    record Located(File index, File data) {
    }

    private final long maxBytes;
    private final LongSupplier nanoClock;
    private final JobConf jobConf;
    /** Guarded by this; in access order (least recently used first). */
    private final LinkedHashMap<Key, SpillRecord> indexes = new LinkedHashMap<>(16, 0.75f, true);
    /** Guarded by this: when each missing attempt is to be looked for again (nanoClock), oldest first. */
    private final LinkedHashMap<Key, Long> missing = new LinkedHashMap<>();
    private long heldBytes;
    private final AtomicLong indexReads = new AtomicLong();
    private final AtomicLong lookups = new AtomicLong();

    IndexCache(long maxBytes, JobConf jobConf) {
        this(maxBytes, jobConf, System::nanoTime);
    }

    IndexCache(long maxBytes, JobConf jobConf, LongSupplier nanoClock) {
        this.maxBytes = maxBytes;
        this.jobConf = jobConf;
        this.nanoClock = nanoClock;
    }

    static long bytesOf(SpillRecord spill) {
        return (long) spill.size() * ShuffleServer.INDEX_RECORD_BYTES;
    }

    /**
     * The files of {@code attempt}'s output in {@code job}'s directories, or null when they are not here (that
     * answer remembered for {@link #MISSING_NANOS}).
     */
    Located locate(ServedJobs.Job job, TaskAttemptID attempt, Key key) {
        synchronized (this) {
            Long until = missing.get(key);
            if (until != null) {
                if (nanoClock.getAsLong() - until < 0) {
                    return null;
                }
                missing.remove(key);
            }
        }
        lookups.incrementAndGet();
        String base = "output/" + attempt + "/";
        File index = job.find(base + "file.out.index");
        File data = index == null ? null : job.find(base + "file.out");
        if (index != null && data != null) {
            return new Located(index, data);
        }
        synchronized (this) {
            missing.put(key, nanoClock.getAsLong() + MISSING_NANOS);
            if (missing.size() > MAX_MISSING) {
                Iterator<Key> oldest = missing.keySet().iterator();
                oldest.next();
                oldest.remove();
            }
        }
        return null;
    }

    /** Reads {@code index} (one disk read, counted) without caching it. */
    SpillRecord read(File index) throws IOException {
        indexReads.incrementAndGet();
        return new SpillRecord(new Path(index.getPath()), jobConf);
    }

    /** Holds {@code spill} as {@code key}'s index, dropping the least recently used ones past the limit. */
    void put(Key key, SpillRecord spill) {
        long bytes = bytesOf(spill);
        synchronized (this) {
            SpillRecord old = indexes.remove(key);
            if (old != null) {
                heldBytes -= bytesOf(old);
            }
            if (bytes > maxBytes) {
                return; // larger than the whole cache: read from its file each time
            }
            indexes.put(key, spill);
            heldBytes += bytes;
            Iterator<Map.Entry<Key, SpillRecord>> lru = indexes.entrySet().iterator();
            while (heldBytes > maxBytes) {
                heldBytes -= bytesOf(lru.next().getValue());
                lru.remove();
            }
        }
    }

    /**
     * {@code key}'s index, from memory or read again from {@code index} (then held), checked to be one of
     * {@code partitions} records.
     *
     * @throws IOException when it cannot be read again or no longer has {@code partitions} records
     */
    SpillRecord get(Key key, File index, int partitions) throws IOException {
        synchronized (this) {
            SpillRecord s = indexes.get(key);
            if (s != null) {
                return s;
            }
        }
        if (LocalDirs.plainFileLength(index) != (long) partitions * ShuffleServer.INDEX_RECORD_BYTES
                + ShuffleServer.INDEX_CHECKSUM_BYTES) {
            throw new IOException(index + " is no longer a plain index file of " + partitions + " partitions");
        }
        SpillRecord s = read(index);
        if (s.size() != partitions) {
            throw new IOException(index + " has " + s.size() + " partitions, not " + partitions);
        }
        put(key, s);
        return s;
    }

    /** Forgets everything of {@code shuffleId}'s job (it stopped). */
    synchronized void dropJob(int shuffleId) {
        Iterator<Map.Entry<Key, SpillRecord>> it = indexes.entrySet().iterator();
        while (it.hasNext()) {
            Map.Entry<Key, SpillRecord> e = it.next();
            if (e.getKey().shuffleId() == shuffleId) {
                heldBytes -= bytesOf(e.getValue());
                it.remove();
            }
        }
        missing.keySet().removeIf(k -> k.shuffleId() == shuffleId);
    }

    /** Bytes of index records held now (never more than the limit). */
    synchronized long heldBytes() {
        return heldBytes;
    }

    /** Indexes held now. */
    synchronized int heldIndexes() {
        return indexes.size();
    }

    /** Index files read so far (first registrations and re-reads of dropped ones). */
    long indexReads() {
        return indexReads.get();
    }

    /** Looks for an attempt's files on the local dirs so far (an answer remembered as missing is not one). */
    long lookups() {
        return lookups.get();
    }
}
