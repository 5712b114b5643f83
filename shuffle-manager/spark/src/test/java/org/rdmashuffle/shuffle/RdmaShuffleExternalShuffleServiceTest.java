package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.network.TransportContext;
import org.apache.spark.network.server.TransportServer;
import org.apache.spark.network.shuffle.ExternalBlockHandler;
import org.apache.spark.network.util.TransportConf;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Option;

/**
 * With Spark's external shuffle service on, an executor that goes keeps its map outputs available:
 * the service serves its files. Readers take just that executor's blocks through Spark's client (one
 * INFO line) and READ the rest — no fetch failure, no rerun of the map stage; and a reader whose READs
 * fail (a frozen executor) fetches the rest through the service instead of failing the fetch.
 */
class RdmaShuffleExternalShuffleServiceTest {

    /** Spark's external shuffle service, as a NodeManager's or a standalone Worker's runs, in this JVM. */
    private static final class Service implements AutoCloseable {
        final TransportContext context;
        final TransportServer server;

        Service() throws java.io.IOException {
            SparkConf serviceConf = new SparkConf().set("spark.shuffle.service.enabled", "true");
            TransportConf transport = SparkLines.transportConf(serviceConf, "shuffle", 2);
            context = new TransportContext(transport, new ExternalBlockHandler(transport, null));
            server = context.createServer();
        }

        /** Three executors registered with this service (local-cluster workers do not start one). */
        SparkConf clusterConf() {
            return LocalCluster.conf(true).setMaster("local-cluster[3,1,1024]")
                    .set("spark.shuffle.service.enabled", "true")
                    .set("spark.shuffle.service.port", Integer.toString(server.getPort()))
                    // every executor is on 127.0.0.1: without this Spark would read the files from disk
                    // instead of asking the service
                    .set("spark.shuffle.readHostLocalDisk", "false");
        }

        @Override
        public void close() {
            server.close();
            context.close();
        }
    }

    /**
     * A serving executor frozen (SIGSTOP) while others READ from it, the service still up: their READs
     * time out, and instead of failing the fetch (a map rerun) the tasks fetch their remaining blocks
     * through Spark's client and the service — every record right, no fetch failure, no stage retry.
     */
    @Test
    @Timeout(400)
    void shouldFetchTheRestThroughTheServiceInsteadOfFailingWhenReadsFromAFrozenExecutorTimeOut() throws Exception {
        LocalCluster.assumeKill();
        try (Service service = new Service();
             LocalCluster cluster = new LocalCluster(service.clusterConf()
                     .set("spark.shuffle.rdma.requestTimeout", "3s"))) {
            JavaPairRDD<Integer, byte[]> shuffled = RdmaShuffleTaskEndTest.records(cluster.sc)
                    .partitionBy(new org.apache.spark.HashPartitioner(12));
            List<String> expected = RdmaShuffleTaskEndTest.digests(shuffled); // map outputs on all three
            Map<String, LocalCluster.ExecutorProbe> before = cluster.probe(3);
            String frozen = LocalCluster.holdingOutputs(before);
            long pid = cluster.executorPids(3).get(frozen);
            int stagesBefore = cluster.stagesCompleted();
            // the same map outputs, one holder frozen for 20 s
            List<String> got = LocalCluster.whileFrozen(pid, 20_000, () -> RdmaShuffleTaskEndTest.digests(shuffled));
            assertEquals(expected, got);
            List<LocalCluster.StageShuffle> stages = cluster.stagesSince(stagesBefore);
            assertEquals(1, stages.size(), "only the reduce stage ran, once: " + stages);
            assertTrue(cluster.recorder.fetchFailures.isEmpty(), "fetch failures: " + cluster.recorder.fetchFailures);
            Map<String, LocalCluster.ExecutorProbe> after = cluster.probe(3);
            long viaSpark = 0;
            for (LocalCluster.ExecutorProbe p : after.values()) {
                if (!p.executorId().equals(frozen)) {
                    viaSpark += p.stats().blocksViaSpark() - before.get(p.executorId()).stats().blocksViaSpark();
                }
            }
            assertTrue(viaSpark > 0, "no reader fetched through the service after its READs timed out");
        }
    }


    @Test
    @Timeout(300)
    void shouldReadARemovedExecutorsBlocksThroughTheServiceAndTheRestByReadWithoutRerunningMaps() throws Exception {
        try (Service service = new Service()) {
            SparkConf conf = service.clusterConf();
            try (LocalCluster cluster = new LocalCluster(conf)) {
                JavaPairRDD<Integer, Long> grouped = ShuffleJobs.pairs(cluster.sc, 120_000, 12, 4_000)
                        .groupByKey(6).mapValues(ShuffleJobs::digest);
                Map<Integer, Long> first = new TreeMap<>(grouped.collectAsMap());
                assertEquals(4_000, first.size());
                Map<String, LocalCluster.ExecutorProbe> before = cluster.probe(3);
                String gone = LocalCluster.holdingOutputs(before);
                int shuffleId = before.get(gone).stats().shuffles().get(0);
                long goneBlocks = 0; // the non-empty blocks its map outputs hold, as the driver tracks them
                scala.collection.Iterator<scala.Tuple2<org.apache.spark.storage.BlockManagerId,
                        scala.collection.Seq<scala.Tuple3<org.apache.spark.storage.BlockId, Object, Object>>>> byExec =
                        org.apache.spark.SparkEnv.get().mapOutputTracker().getMapSizesByExecutorId(shuffleId, 0,
                                Integer.MAX_VALUE, 0, 6);
                while (byExec.hasNext()) {
                    var e = byExec.next();
                    if (e._1().executorId().equals(gone)) {
                        for (var b : SparkLines.asJava(e._2())) {
                            goneBlocks += (Long) b._2() > 0 ? 1 : 0;
                        }
                    }
                }
                assertTrue(goneBlocks > 0);

                assertTrue(cluster.sc.sc().killExecutor(gone), "Spark did not accept killing executor " + gone);
                long deadline = System.nanoTime() + 60_000_000_000L;
                while (cluster.executorIds().contains(gone) && System.nanoTime() < deadline) {
                    Thread.sleep(100);
                }
                assertTrue(!cluster.executorIds().contains(gone), "executor " + gone + " still there after 60 s");
                cluster.drainEvents();
                int stagesBefore = cluster.stagesCompleted();

                // The same shuffle again: its map outputs stay registered (the service serves them).
                Map<Integer, Long> second = new TreeMap<>(grouped.collectAsMap());
                assertEquals(first, second);
                List<LocalCluster.StageShuffle> stages = cluster.stagesSince(stagesBefore);
                assertEquals(1, stages.size(), "only the reduce stage ran (no map rerun): " + stages);
                assertTrue(cluster.recorder.fetchFailures.isEmpty(), "fetch failures: " + cluster.recorder.fetchFailures);

                Map<String, LocalCluster.ExecutorProbe> after = cluster.probe(2);
                assertTrue(!after.containsKey(gone));
                long viaSpark = LocalCluster.growth(before, after, RdmaShuffleManager.ExecutorStats::blocksViaSpark);
                long reads = LocalCluster.growth(before, after, s -> s.node().readsCompleted());
                assertEquals(goneBlocks, viaSpark, "exactly the removed executor's blocks come through Spark's "
                        + "client (fewer: some were READ from a node that is gone; more: whole tasks fell back)");
                assertTrue(reads > 0, "the remaining executors' blocks were not READ");
                assertEquals(0, LocalCluster.growth(before, after, RdmaShuffleManager.ExecutorStats::receiveMemoryFallbacks));
            }
        }
    }
}
