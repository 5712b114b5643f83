package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.FetchFailed;
import org.apache.spark.HashPartitioner;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.JavaPairRDD;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A byte flipped in a committed map output (in every partition of one map's data file, after the map
 * stage ran) is found wherever Spark's own shuffle finds it — compressed blocks with
 * {@code spark.shuffle.detectCorrupt} — and ends as Spark's does: a {@code FetchFailedException} for
 * that map naming the cause Spark's checksums find ({@code DISK_ISSUE}), the map rerun, and every record right. Spark's sort shuffle runs the same job first, to
 * show that it recovers too.
 */
class RdmaShuffleCorruptionTest {
    private static final int PARTITIONS = 8;

    /** On the executor that runs it: flips one byte in the middle of every partition of one map output's data file. */
    static String flipOneMapOutput(int shuffleId) {
        List<Path> data = new ArrayList<>();
        java.util.Map<String, Path> indexes = new java.util.HashMap<>(); // Spark spreads one output's files over subfolders
        for (File dir : SparkEnv.get().blockManager().diskBlockManager().localDirs()) {
            try (var files = Files.walk(dir.toPath())) {
                files.filter(p -> p.getFileName().toString().startsWith("shuffle_" + shuffleId + "_")).forEach(p -> {
                    String name = p.getFileName().toString();
                    if (name.endsWith(".data")) {
                        data.add(p);
                    } else if (name.endsWith(".index")) {
                        indexes.put(name, p);
                    }
                });
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        if (data.isEmpty()) {
            return "";
        }
        data.sort(java.util.Comparator.comparing(p -> p.getFileName().toString()));
        Path file = data.get(0);
        Path index = indexes.get(file.getFileName().toString().replace(".data", ".index"));
        int flipped = 0;
        try (FileChannel idx = FileChannel.open(index, StandardOpenOption.READ);
             FileChannel ch = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            ByteBuffer offsets = ByteBuffer.allocate((int) idx.size());
            while (offsets.hasRemaining() && idx.read(offsets) >= 0) {
                // read the whole index
            }
            offsets.flip();
            long start = offsets.getLong();
            while (offsets.remaining() >= Long.BYTES) {
                long end = offsets.getLong();
                if (end - start > 64) {
                    long at = start + (end - start) / 2;
                    ByteBuffer b = ByteBuffer.allocate(1);
                    ch.read(b, at);
                    b.put(0, (byte) (b.get(0) ^ 0x5A)).rewind();
                    ch.write(b, at);
                    flipped++;
                }
                start = end;
            }
            ch.force(true);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return SparkEnv.get().executorId() + ":" + file.getFileName() + ":" + flipped;
    }

    /**
     * Runs the map stage, corrupts one map output, runs the reduce stage over the same map outputs, and
     * checks the records against those of an uncorrupted run; returns the fetch failures Spark saw.
     */
    private static List<FetchFailed> corruptAndReduce(SparkConf conf, List<String> expected) {
        try (LocalCluster cluster = new LocalCluster(conf)) {
            JavaPairRDD<Integer, byte[]> shuffled = RdmaShuffleTaskEndTest.records(cluster.sc)
                    .partitionBy(new HashPartitioner(PARTITIONS));
            assertEquals(200_000, shuffled.count()); // the map stage, outputs committed
            int shuffleId = ((ShuffleDependency<?, ?, ?>) shuffled.rdd().dependencies().head()).shuffleId();
            String what = cluster.sc.parallelize(List.of(0), 1).map(x -> flipOneMapOutput(shuffleId)).collect().get(0);
            assertFalse(what.isEmpty() || what.endsWith(":0"), "no map output was corrupted: " + what);
            List<String> got = RdmaShuffleTaskEndTest.digests(shuffled); // reuses the map outputs, one of them now corrupt
            cluster.drainEvents();
            assertEquals(expected, got, "records after corrupting " + what);
            String corrupted = what.substring(0, what.indexOf(':'));
            for (FetchFailed f : cluster.recorder.fetchFailures) {
                assertEquals(corrupted, f.bmAddress().executorId(), "blamed another executor than the one whose "
                        + "output was corrupted (" + what + "): " + f.message());
            }
            if (conf.contains("spark.shuffle.manager")) {
                long read = cluster.probe().values().stream().mapToLong(p -> p.stats().node().bytesRead()).sum();
                assertTrue(read > 0, "nothing was READ over the transport");
                // a corrupt READ block is the peer's fault: its cached table and metadata are not trusted again
                long forgotten = cluster.probe().values().stream().mapToLong(p -> p.stats().peersForgotten()).sum();
                assertTrue(forgotten >= cluster.recorder.fetchFailures.size(), forgotten + " peers forgotten after "
                        + cluster.recorder.fetchFailures.size() + " fetch failures");
            }
            return new ArrayList<>(cluster.recorder.fetchFailures);
        }
    }

    private static SparkConf conf(boolean rdma) {
        return LocalCluster.conf(rdma)
                .set("spark.shuffle.compress", "true") // Spark finds corruption in compressed blocks only
                .set("spark.shuffle.detectCorrupt", "true")
                .set("spark.task.maxFailures", "2");
    }

    @Test
    @Timeout(600)
    void shouldRerunTheMapAndDeliverEveryRecordWhenACommittedMapOutputHasAFlippedByteAsSortShuffleDoes() {
        List<String> expected;
        try (LocalCluster clean = LocalCluster.inProcess(conf(false))) {
            expected = RdmaShuffleTaskEndTest.digests(RdmaShuffleTaskEndTest.records(clean.sc)
                    .partitionBy(new HashPartitioner(PARTITIONS)));
        }
        List<FetchFailed> sort = corruptAndReduce(conf(false), expected);
        assertFalse(sort.isEmpty(), "Spark's sort shuffle did not notice the corrupt map output");

        for (boolean early : new boolean[] {false, true}) {
            List<FetchFailed> rdma = corruptAndReduce(conf(true)
                    .set("spark.shuffle.rdma.localBlocksFromDisk", "false") // every block READ over the transport
                    .set("spark.shuffle.detectCorrupt.useExtraMemory", Boolean.toString(early)), expected);
            assertFalse(rdma.isEmpty(), "rdma-shuffle did not report the corrupt map output (useExtraMemory="
                    + early + ")");
            // The corrupt block is reported as corrupt. A reducer of the same stage attempt still running when
            // the map is rerun may then READ the replaced output and fail on its stale key, on the same executor.
            assertTrue(rdma.stream().anyMatch(f -> f.message().contains("corrupt")),
                    "no fetch failure names the corruption: " + rdma);
            // Spark's shuffle checksums (on by default) tell where: the byte was flipped on disk, after the writer
            // stored its checksum, and the failure says so in Spark's words
            assertTrue(rdma.stream().anyMatch(f -> f.message().contains("is corrupted due to DISK_ISSUE")),
                    "no fetch failure names the cause DISK_ISSUE (useExtraMemory=" + early + "): " + rdma);
            for (FetchFailed f : rdma) {
                assertTrue(f.message().contains("corrupt") || f.message().contains("stale rkey"),
                        "fetch failure for another reason: " + f.message());
            }
        }
    }

    /**
     * Issue 33: bytes found corrupt while a READ block's records were read (some handed on already) blamed the
     * peer without asking the core's classifier whether the peer withdrew its node. Every executor has every
     * peer's node cached from a first reduce; one map output is corrupted and its executor's node leaves the
     * driver's directory (as a failed node withdraws itself); the second reduce READs the corrupt blocks from the
     * cached node: the task fails blaming nobody and is retried, the withdrawn executor's blocks then coming through
     * Spark's path (whose own corruption check reruns the map), and every record is right.
     */
    @Test
    @Timeout(600)
    void shouldBlameNobodyWhenABlockIsFoundCorruptMidDecodeAfterItsPeerWithdrewItsNode() throws Exception {
        List<String> expected;
        try (LocalCluster clean = LocalCluster.inProcess(conf(false))) {
            expected = RdmaShuffleTaskEndTest.digests(RdmaShuffleTaskEndTest.records(clean.sc)
                    .partitionBy(new HashPartitioner(PARTITIONS)));
        }
        SparkConf conf = conf(true).set("spark.shuffle.rdma.localBlocksFromDisk", "false")
                .set("spark.shuffle.detectCorrupt.useExtraMemory", "false") // found while records are read
                .set("spark.task.maxFailures", "4");
        try (LocalCluster cluster = new LocalCluster(conf)) {
            JavaPairRDD<Integer, byte[]> shuffled = RdmaShuffleTaskEndTest.records(cluster.sc)
                    .partitionBy(new HashPartitioner(PARTITIONS));
            assertEquals(expected, RdmaShuffleTaskEndTest.digests(shuffled)); // every executor READ every other
            int shuffleId = ((ShuffleDependency<?, ?, ?>) shuffled.rdd().dependencies().head()).shuffleId();
            String what = cluster.sc.parallelize(List.of(0), 1).map(x -> flipOneMapOutput(shuffleId)).collect().get(0);
            assertFalse(what.isEmpty() || what.endsWith(":0"), "no map output was corrupted: " + what);
            String corrupted = what.substring(0, what.indexOf(':'));
            // its node withdrawn from the driver's directory; the readers still hold it cached
            new NodeDirectory.Client(cluster.sc.getConf(), SparkEnv.get().rpcEnv()).forget(corrupted);
            int failuresBefore = cluster.recorder.fetchFailures.size();
            int failedTasksBefore = cluster.recorder.failedTasks.size();
            List<String> got = RdmaShuffleTaskEndTest.digests(shuffled);
            cluster.drainEvents();
            assertEquals(expected, got, "records after corrupting " + what);
            List<String> blamedByReads = cluster.recorder.fetchFailures.subList(failuresBefore,
                    cluster.recorder.fetchFailures.size()).stream().map(FetchFailed::message)
                    .filter(m -> m.contains("from BlockManagerId(")).toList(); // the READ path's words, not Spark's
            assertTrue(blamedByReads.isEmpty(), "a READ block found corrupt mid-decode blamed executor " + corrupted
                    + ", which withdrew its node: " + blamedByReads);
            List<String> failed = cluster.recorder.failedTasks.subList(failedTasksBefore,
                    cluster.recorder.failedTasks.size());
            assertTrue(failed.stream().anyMatch(t -> t.contains("withdrew its RDMA node while block")
                    && t.contains("was decoded from it")), "no task failed blaming nobody: " + failed);
        }
    }
}
