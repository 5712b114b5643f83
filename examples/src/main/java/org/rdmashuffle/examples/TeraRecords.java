package org.rdmashuffle.examples;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.SplittableRandom;
import java.util.zip.CRC32;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import scala.Tuple2;

/**
 * TeraSort's records: 100 bytes each, a 10-byte key and a 90-byte value, generated
 * deterministically per partition; the order they sort in; and the digests that validate a sort.
 */
public final class TeraRecords {
    public static final int KEY_BYTES = 10;
    public static final int VALUE_BYTES = 90;

    private TeraRecords() {
    }

    /** Unsigned lexicographic order of keys, as TeraSort sorts. */
    public static final class KeyOrder implements Comparator<byte[]>, Serializable {
        private static final long serialVersionUID = 1L;

        @Override
        public int compare(byte[] a, byte[] b) {
            return Arrays.compareUnsigned(a, b);
        }
    }

    /** {@code records} records over {@code partitions} partitions, the same for the same seed. */
    public static JavaPairRDD<byte[], byte[]> generate(JavaSparkContext sc, long records, int partitions, long seed) {
        List<Integer> parts = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            parts.add(p);
        }
        return sc.parallelize(parts, partitions).flatMapToPair(p -> {
            long from = records * p / partitions;
            long to = records * (p + 1) / partitions;
            SplittableRandom rnd = new SplittableRandom(seed * 1_000_003L + p);
            return new Iterator<Tuple2<byte[], byte[]>>() {
                private long next = from;

                @Override
                public boolean hasNext() {
                    return next < to;
                }

                @Override
                public Tuple2<byte[], byte[]> next() {
                    byte[] k = new byte[KEY_BYTES];
                    rnd.nextBytes(k);
                    byte[] v = new byte[VALUE_BYTES];
                    long row = next++;
                    for (int i = 0; i < VALUE_BYTES; i++) {
                        v[i] = (byte) ('A' + (row + i) % 26);
                    }
                    return new Tuple2<>(k, v);
                }
            };
        });
    }

    /** CRC32 of a record's key and value: summed, an order-independent checksum of a data set. */
    public static long crc(byte[] key, byte[] value) {
        CRC32 c = new CRC32();
        c.update(key);
        c.update(value);
        return c.getValue();
    }

    /**
     * One sorted partition: its record count, checksum sum, first and last key, and whether its
     * keys were in order. (A class, not a record: Kryo, the job's serializer, cannot build records.)
     */
    public static final class PartitionDigest implements Serializable {
        private static final long serialVersionUID = 1L;
        private final int partition;
        private final long count;
        private final long checksum;
        private final byte[] firstKey;
        private final byte[] lastKey;
        private final boolean ordered;

        PartitionDigest(int partition, long count, long checksum, byte[] firstKey, byte[] lastKey, boolean ordered) {
            this.partition = partition;
            this.count = count;
            this.checksum = checksum;
            this.firstKey = firstKey;
            this.lastKey = lastKey;
            this.ordered = ordered;
        }

        public int partition() {
            return partition;
        }

        public long count() {
            return count;
        }

        public long checksum() {
            return checksum;
        }

        public byte[] firstKey() {
            return firstKey;
        }

        public byte[] lastKey() {
            return lastKey;
        }

        public boolean ordered() {
            return ordered;
        }

        /** The same digest as partition {@code index}. */
        public PartitionDigest renumbered(int index) {
            return new PartitionDigest(index, count, checksum, firstKey, lastKey, ordered);
        }

        /** Digests partition {@code index} of a sorted data set. */
        public static PartitionDigest of(int index, Iterator<Tuple2<byte[], byte[]>> it) {
            KeyOrder order = new KeyOrder();
            long n = 0;
            long sum = 0;
            byte[] first = null;
            byte[] last = null;
            boolean ordered = true;
            while (it.hasNext()) {
                Tuple2<byte[], byte[]> r = it.next();
                if (first == null) {
                    first = r._1();
                } else if (order.compare(last, r._1()) > 0) {
                    ordered = false;
                }
                last = r._1();
                sum += crc(r._1(), r._2());
                n++;
            }
            return new PartitionDigest(index, n, sum, first, last, ordered);
        }

        /** Count and checksum only: what must be equal across shuffle managers. */
        public String summary() {
            return partition + ":" + count + ":" + checksum;
        }
    }

    /**
     * Checks that {@code digests} (in partition order) form one globally sorted data set of
     * {@code records} records with checksum {@code checksum}; returns the problems found.
     */
    public static List<String> validate(List<PartitionDigest> digests, long records, long checksum) {
        List<String> problems = new ArrayList<>();
        KeyOrder order = new KeyOrder();
        long n = 0;
        long sum = 0;
        byte[] previousLast = null;
        for (PartitionDigest d : digests) {
            n += d.count();
            sum += d.checksum();
            if (!d.ordered()) {
                problems.add("partition " + d.partition() + " is not sorted");
            }
            if (d.count() > 0) {
                if (previousLast != null && order.compare(previousLast, d.firstKey()) > 0) {
                    problems.add("partition " + d.partition() + " starts below the previous partition's last key");
                }
                previousLast = d.lastKey();
            }
        }
        if (n != records) {
            problems.add(n + " records sorted, " + records + " generated");
        }
        if (sum != checksum) {
            problems.add("checksum " + sum + " of the sorted records, " + checksum + " of the generated ones");
        }
        return problems;
    }
}
