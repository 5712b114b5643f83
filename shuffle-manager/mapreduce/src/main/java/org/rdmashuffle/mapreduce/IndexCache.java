package org.rdmashuffle.mapreduce;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;
import java.util.zip.CRC32;
import org.apache.hadoop.mapred.IndexRecord;
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
 * <p>An index is read from a channel {@link LocalDirs#openPlainFiles} opened (never by path: what is read is the
 * file checked).
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

    static final String INDEX = "file.out.index";
    static final String DATA = "file.out";

    /**
     * An attempt's files on this NodeManager, each in the directory {@code below} names relative to a local dir
     * (where {@link LocalDirs#openPlainFiles} opens them from): the same local dir, or two (Hadoop's map task asks its
     * local dir allocator for each file apart, so with several local dirs they may lie on different disks).
     */
    record Located(File index, File data, String below) {
        /** The files of an attempt whose index is {@code index}, {@code below} a local dir. */
        static Located of(File index, String below) {
            File dir = index.getParentFile();
            return new Located(new File(dir, INDEX), new File(dir, DATA), below);
        }

        File dir() {
            return index.getParentFile();
        }

        /** Opens the index (0) and the data file (1), each from its own directory. */
        LocalDirs.OpenedFiles open(LocalDirs.Rules rules) throws IOException {
            return LocalDirs.openPlainFiles(index.getParentFile(), INDEX, data.getParentFile(), DATA, below, rules);
        }
    }

    /** Where {@code attempt}'s outputs are relative to a local dir. */
    static String attemptDir(ServedJobs.Job job, TaskAttemptID attempt) {
        return LocalDirs.appBase(job.user, job.appId) + "/output/" + attempt;
    }

    private final long maxBytes;
    private final LongSupplier nanoClock;
    /** Guarded by this; in access order (least recently used first). */
    private final LinkedHashMap<Key, SpillRecord> indexes = new LinkedHashMap<>(16, 0.75f, true);
    /** Guarded by this: when each missing attempt is to be looked for again (nanoClock), oldest first. */
    private final LinkedHashMap<Key, Long> missing = new LinkedHashMap<>();
    private long heldBytes;
    private final AtomicLong indexReads = new AtomicLong();
    private final AtomicLong lookups = new AtomicLong();

    IndexCache(long maxBytes) {
        this(maxBytes, System::nanoTime);
    }

    IndexCache(long maxBytes, LongSupplier nanoClock) {
        this.maxBytes = maxBytes;
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
        File index = job.find(base + INDEX);
        File data = index == null ? null : job.find(base + DATA);
        if (index != null && data != null) { // each where the map task's allocator put it
            return new Located(index, data, attemptDir(job, attempt));
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

    /** Opens and reads {@code at}'s index of {@code partitions} records (one disk read, counted) without caching it. */
    SpillRecord read(Located at, int partitions) throws IOException {
        return read(at, partitions, LocalDirs.Rules.ANY);
    }

    /** {@link #read(Located, int)}, the index file opened under {@code rules} (its owner, how it is opened). */
    SpillRecord read(Located at, int partitions, LocalDirs.Rules rules) throws IOException {
        try (LocalDirs.OpenedFiles f = LocalDirs.openPlainFiles(at.dir(), at.below(), rules, INDEX)) {
            return read(f.get(0), at.index().toString(), partitions);
        }
    }

    /**
     * Reads an index of {@code partitions} records from {@code index} (opened and checked by the caller; one disk
     * read, counted), its checksum checked as Hadoop's {@code SpillRecord} checks it, without caching it.
     *
     * @throws IOException when it is not exactly {@code partitions} records and their CRC32, or the CRC differs
     */
    SpillRecord read(FileChannel index, String name, int partitions) throws IOException {
        indexReads.incrementAndGet();
        long recordBytes = (long) partitions * ShuffleServer.INDEX_RECORD_BYTES;
        long size = index.size();
        if (size != recordBytes + ShuffleServer.INDEX_CHECKSUM_BYTES || size > Integer.MAX_VALUE) {
            throw new IOException(name + " (" + size + " bytes) is not an index of " + partitions + " partitions");
        }
        ByteBuffer b = ByteBuffer.allocate((int) size);
        while (b.hasRemaining()) {
            if (index.read(b, b.position()) < 0) {
                throw new IOException(name + " ended while it was read");
            }
        }
        CRC32 crc = new CRC32();
        crc.update(b.array(), 0, (int) recordBytes);
        if (crc.getValue() != b.getLong((int) recordBytes)) {
            throw new IOException("checksum error in " + name);
        }
        SpillRecord spill = new SpillRecord(partitions);
        for (int p = 0; p < partitions; p++) {
            int at = p * ShuffleServer.INDEX_RECORD_BYTES;
            spill.putIndex(new IndexRecord(b.getLong(at), b.getLong(at + 8), b.getLong(at + 16)), p);
        }
        return spill;
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
     * {@code key}'s index, from memory or read again from {@code at}'s index file (then held), checked to be one
     * of {@code partitions} records.
     *
     * @throws IOException when it cannot be read again or no longer has {@code partitions} records
     */
    SpillRecord get(Key key, Located at, int partitions) throws IOException {
        return get(key, at, partitions, LocalDirs.Rules.ANY);
    }

    /** {@link #get(Key, Located, int)}, an index file read again opened under {@code rules}. */
    SpillRecord get(Key key, Located at, int partitions, LocalDirs.Rules rules) throws IOException {
        synchronized (this) {
            SpillRecord s = indexes.get(key);
            if (s != null) {
                return s;
            }
        }
        SpillRecord s = read(at, partitions, rules);
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

    /** The partitions' offsets if {@code spill} lays them out back to back from 0 within the file, else null. */
    static long[] offsets(SpillRecord spill, int partitions, long fileLength) {
        if (spill.size() != partitions) {
            return null;
        }
        long[] offsets = new long[partitions + 1];
        long at = 0;
        for (int p = 0; p < partitions; p++) {
            IndexRecord rec = spill.getIndex(p);
            if (rec.startOffset != at || rec.partLength < 0 || rec.rawLength < 0) {
                return null;
            }
            offsets[p] = at;
            at += rec.partLength;
        }
        offsets[partitions] = at;
        return at <= fileLength ? offsets : null;
    }

}
