package org.rdmashuffle.examples;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.spark.FetchFailed;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import scala.Tuple2;

/**
 * The fault harness's job ({@code benchmarks/faults/run.sh}): one application, one shuffle manager,
 * a shuffle of deterministic records whose every record is checked — an order-independent digest
 * (count, sum and xor of a 64-bit hash of each record) over what the reduce stage received, against
 * the digest of what the generator produced. Writes one JSON line: whether the result was right, job
 * time, stage retries, fetch failures, lost executors and when the first failure was seen.
 *
 * <p>Options: {@code --manager sort|rdma}, {@code --records N} (1,500,000 of ~100 bytes),
 * {@code --maps M} (12), {@code --partitions P} (24), {@code --reduce-ms T} (per reduce task, to
 * leave room for a fault mid-reduce; 1500), {@code --result FILE}, and the common
 * {@code --master --executors --jars --conf}. Exit code 0: right; 3: wrong records; 4: job failed.
 */
public final class FaultJob {
    private FaultJob() {
    }

    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }

    static int key(long i) {
        return (int) Math.floorMod(mix(i), 200_000L);
    }

    static byte[] value(long i) {
        byte[] v = new byte[60 + (int) (i % 80)];
        new SplittableRandom(i).nextBytes(v);
        return v;
    }

    static long hash(int key, byte[] value) {
        long h = 0xcbf29ce484222325L ^ key;
        for (byte b : value) {
            h = (h ^ (b & 0xff)) * 0x100000001b3L;
        }
        return mix(h + value.length);
    }

    /** count, sum, xor */
    record Digest(long count, long sum, long xor) implements java.io.Serializable {
        Digest plus(Digest o) {
            return new Digest(count + o.count, sum + o.sum, xor ^ o.xor);
        }
    }

    public static void main(String[] args) throws Exception {
        Cluster.Options o = Cluster.Options.parse(args, 1, "local-cluster[3,1,1024]",
                Set.of("--manager", "--records", "--maps", "--partitions", "--reduce-ms", "--result"));
        boolean rdma = switch (o.get("--manager", "rdma")) {
            case "rdma" -> true;
            case "sort" -> false;
            default -> throw new IllegalArgumentException("--manager takes sort or rdma");
        };
        long records = Long.parseLong(o.get("--records", "1500000"));
        int maps = Integer.parseInt(o.get("--maps", "12"));
        int partitions = Integer.parseInt(o.get("--partitions", "24"));
        long reduceMs = Long.parseLong(o.get("--reduce-ms", "1500"));
        Path result = Path.of(o.get("--result", "faults-result.json"));

        Digest expected = new Digest(0, 0, 0);
        for (long i = 0; i < records; i++) {
            long h = hash(key(i), value(i));
            expected = new Digest(expected.count + 1, expected.sum + h, expected.xor ^ h);
        }

        SparkConf conf = Cluster.configure(new SparkConf().setMaster(o.master)
                .setAppName("rdma-shuffle-faults-" + (rdma ? "rdma" : "sort")), rdma, o.jars, o.conf);
        AtomicInteger stageRetries = new AtomicInteger();
        AtomicInteger fetchFailures = new AtomicInteger();
        Set<String> blamedHosts = java.util.concurrent.ConcurrentHashMap.newKeySet();
        AtomicInteger executorsLost = new AtomicInteger();
        AtomicLong firstFailure = new AtomicLong();
        String outcome;
        Digest got = null;
        long t0;
        long t1;
        try (JavaSparkContext sc = new JavaSparkContext(conf)) {
            Cluster.waitForExecutors(sc.sc(), o.master, o.executors);
            sc.sc().addSparkListener(new SparkListener() {
                @Override
                public void onStageSubmitted(SparkListenerStageSubmitted e) {
                    if (e.stageInfo().attemptNumber() > 0) {
                        stageRetries.incrementAndGet();
                    }
                }

                @Override
                public void onTaskEnd(SparkListenerTaskEnd e) {
                    if (e.reason() instanceof FetchFailed f) {
                        fetchFailures.incrementAndGet();
                        if (f.bmAddress() != null) {
                            blamedHosts.add(f.bmAddress().host());
                        }
                        firstFailure.compareAndSet(0, System.currentTimeMillis());
                    }
                }

                @Override
                public void onExecutorRemoved(SparkListenerExecutorRemoved e) {
                    executorsLost.incrementAndGet();
                    firstFailure.compareAndSet(0, System.currentTimeMillis());
                }
            });
            long perMap = (records + maps - 1) / maps;
            List<Integer> mapIds = new ArrayList<>();
            for (int m = 0; m < maps; m++) {
                mapIds.add(m);
            }
            t0 = System.currentTimeMillis();
            try {
                got = sc.parallelize(mapIds, maps).flatMapToPair(m -> {
                    long from = m * perMap;
                    long to = Math.min(records, from + perMap);
                    List<Tuple2<Integer, byte[]>> out = new ArrayList<>();
                    for (long i = from; i < to; i++) {
                        out.add(new Tuple2<>(key(i), value(i)));
                    }
                    return out.iterator();
                }).partitionBy(new HashPartitioner(partitions)).mapPartitions(it -> {
                    long n = 0;
                    long sum = 0;
                    long xor = 0;
                    while (it.hasNext()) {
                        Tuple2<Integer, byte[]> r = it.next();
                        long h = hash(r._1(), r._2());
                        n++;
                        sum += h;
                        xor ^= h;
                    }
                    Thread.sleep(reduceMs);
                    return List.of(new Digest(n, sum, xor)).iterator();
                }).reduce(Digest::plus);
                outcome = got.equals(expected) ? "correct" : "wrong";
            } catch (Exception e) {
                outcome = "failed";
                System.err.println("job failed: " + e);
            }
            t1 = System.currentTimeMillis();
        }
        String json = String.format(java.util.Locale.ROOT,
                "{\"manager\":\"%s\",\"outcome\":\"%s\",\"jobMs\":%d,\"startEpochMs\":%d,\"endEpochMs\":%d,"
                        + "\"stageRetries\":%d,\"fetchFailures\":%d,\"executorsLost\":%d,\"firstFailureEpochMs\":%d,"
                        + "\"records\":%d,\"expected\":\"%s\",\"got\":\"%s\",\"blamedHosts\":[%s]}%n",
                rdma ? "rdma" : "sort", outcome, t1 - t0, t0, t1, stageRetries.get(), fetchFailures.get(),
                executorsLost.get(), firstFailure.get(), records, expected, got,
                String.join(",", blamedHosts.stream().sorted().map(h -> "\"" + h + "\"").toList()));
        try {
            Files.writeString(result, json, StandardCharsets.UTF_8);
        } catch (IOException e) {
            System.err.println("cannot write " + result + ": " + e);
        }
        System.out.print(json);
        System.exit(switch (outcome) {
            case "correct" -> 0;
            case "wrong" -> 3;
            default -> 4;
        });
    }
}
