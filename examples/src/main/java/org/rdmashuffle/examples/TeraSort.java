package org.rdmashuffle.examples;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.BytesWritable;
import org.apache.hadoop.mapreduce.lib.input.SequenceFileInputFormat;
import org.apache.hadoop.mapreduce.lib.output.SequenceFileOutputFormat;
import org.apache.spark.SparkConf;
import org.apache.hadoop.mapreduce.lib.input.FileSplit;
import org.apache.spark.api.java.JavaNewHadoopRDD;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import scala.Tuple2;

/**
 * TeraGen, TeraSort and TeraValidate for {@code spark-submit} on any cluster, with Kryo and its
 * classes registered:
 * <pre>
 * spark-submit --class org.rdmashuffle.examples.TeraSort examples.jar gen RECORDS PARTITIONS DIR
 * spark-submit --class org.rdmashuffle.examples.TeraSort examples.jar sort IN_DIR OUT_DIR [PARTITIONS]
 * spark-submit --class org.rdmashuffle.examples.TeraSort examples.jar validate OUT_DIR IN_DIR
 * </pre>
 * Records are Hadoop sequence files of (10-byte key, 90-byte value). {@code gen} also writes the
 * record count and checksum to {@code DIR/_checksum}; {@code validate} checks the sorted output's
 * global order and that its count and checksum equal those, and exits non-zero if not.
 */
public final class TeraSort {
    private static final String CHECKSUM_FILE = "_checksum";

    private TeraSort() {
    }

    /** Kryo with every class the jobs serialise registered (unregistered ones fail). */
    public static SparkConf kryo(SparkConf conf) {
        return conf.set("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
                .set("spark.kryo.registrationRequired", "true")
                .set("spark.kryo.classesToRegister", String.join(",", List.of("[B", "[[B",
                        "org.rdmashuffle.examples.TeraRecords$KeyOrder",
                        "org.rdmashuffle.examples.TeraRecords$PartitionDigest",
                        "[Lorg.rdmashuffle.examples.TeraRecords$PartitionDigest;",
                        "org.apache.hadoop.io.BytesWritable")));
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            usage();
        }
        try (JavaSparkContext sc = new JavaSparkContext(kryo(new SparkConf().setAppName("terasort-" + args[0])))) {
            switch (args[0]) {
                case "gen" -> gen(sc, Long.parseLong(args[1]), Integer.parseInt(args[2]), args[3]);
                case "sort" -> sort(sc, args[1], args[2],
                        args.length > 3 ? Integer.parseInt(args[3]) : sc.defaultParallelism());
                case "validate" -> {
                    List<String> problems = validate(sc, args[1], args[2]);
                    if (!problems.isEmpty()) {
                        System.err.println("TeraValidate FAILED: " + problems);
                        System.exit(1);
                    }
                    System.out.println("TeraValidate: sorted, count and checksum equal TeraGen's");
                }
                default -> usage();
            }
        }
    }

    private static void usage() {
        System.err.println("usage: TeraSort gen RECORDS PARTITIONS DIR | sort IN_DIR OUT_DIR [PARTITIONS] "
                + "| validate OUT_DIR IN_DIR");
        System.exit(2);
    }

    /** Generates {@code records} records into {@code dir}, with their count and checksum. */
    public static void gen(JavaSparkContext sc, long records, int partitions, String dir) throws Exception {
        JavaPairRDD<byte[], byte[]> data = TeraRecords.generate(sc, records, partitions, 42);
        long checksum = data.map(t -> TeraRecords.crc(t._1(), t._2())).reduce(Long::sum);
        data.mapToPair(t -> new Tuple2<>(new BytesWritable(t._1()), new BytesWritable(t._2())))
                .saveAsNewAPIHadoopFile(dir, BytesWritable.class, BytesWritable.class, SequenceFileOutputFormat.class);
        Path p = new Path(dir, CHECKSUM_FILE);
        try (var out = p.getFileSystem(sc.hadoopConfiguration()).create(p)) {
            out.write((records + " " + checksum + "\n").getBytes(StandardCharsets.US_ASCII));
        }
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    private static JavaPairRDD<BytesWritable, BytesWritable> raw(JavaSparkContext sc, String dir) {
        Class<SequenceFileInputFormat<BytesWritable, BytesWritable>> format = (Class) SequenceFileInputFormat.class;
        return sc.newAPIHadoopFile(dir, format, BytesWritable.class, BytesWritable.class, sc.hadoopConfiguration());
    }

    private static JavaPairRDD<byte[], byte[]> read(JavaSparkContext sc, String dir) {
        return raw(sc, dir).mapToPair(t -> new Tuple2<>(t._1().copyBytes(), t._2().copyBytes()));
    }

    /** Sorts {@code in} into {@code out} with {@code partitions} reduce partitions. */
    public static void sort(JavaSparkContext sc, String in, String out, int partitions) {
        read(sc, in).sortByKey(new TeraRecords.KeyOrder(), true, partitions)
                .mapToPair(t -> new Tuple2<>(new BytesWritable(t._1()), new BytesWritable(t._2())))
                .saveAsNewAPIHadoopFile(out, BytesWritable.class, BytesWritable.class, SequenceFileOutputFormat.class);
    }

    /** Problems with {@code out} as the sort of {@code in}: order, count, checksum (empty: valid). */
    public static List<String> validate(JavaSparkContext sc, String out, String in) throws Exception {
        Path p = new Path(in, CHECKSUM_FILE);
        FileSystem fs = p.getFileSystem(sc.hadoopConfiguration());
        String[] expected;
        try (var s = fs.open(p)) {
            expected = new String(s.readAllBytes(), StandardCharsets.US_ASCII).trim().split(" ");
        }
        // A directory lists its part files in no particular order: digest each file, then order by name.
        List<Tuple2<String, TeraRecords.PartitionDigest>> byFile = ((JavaNewHadoopRDD<BytesWritable, BytesWritable>)
                raw(sc, out)).mapPartitionsWithInputSplit((split, it) -> {
                    FileSplit f = (FileSplit) split;
                    String at = f.getPath().getName() + String.format("@%020d", f.getStart());
                    java.util.Iterator<Tuple2<byte[], byte[]>> records = new java.util.Iterator<>() {
                        @Override
                        public boolean hasNext() {
                            return it.hasNext();
                        }

                        @Override
                        public Tuple2<byte[], byte[]> next() {
                            Tuple2<BytesWritable, BytesWritable> t = it.next();
                            return new Tuple2<>(t._1().copyBytes(), t._2().copyBytes());
                        }
                    };
                    return List.of(new Tuple2<>(at, TeraRecords.PartitionDigest.of(0, records))).iterator();
                }, true).collect();
        List<TeraRecords.PartitionDigest> digests = new java.util.ArrayList<>();
        byFile.stream().sorted(java.util.Comparator.comparing(Tuple2::_1))
                .forEach(t -> digests.add(t._2().renumbered(digests.size())));
        return TeraRecords.validate(digests, Long.parseLong(expected[0]), Long.parseLong(expected[1]));
    }
}
