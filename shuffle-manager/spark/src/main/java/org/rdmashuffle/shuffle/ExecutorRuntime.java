package org.rdmashuffle.shuffle;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.spark.SparkEnv;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.shuffle.core.serve.MapOutputServer;
import org.rdmashuffle.shuffle.core.serve.OrphanShuffleCheck;
import org.rdmashuffle.shuffle.core.directory.PeerDirectory;
import org.rdmashuffle.shuffle.core.fetch.ReadAccounting;
import org.rdmashuffle.shuffle.core.directory.RemoteOutputs;
import org.rdmashuffle.transport.RdmaNode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What one executor runs for the shuffle, wired from its SparkEnv: the executor id, the host of its
 * BlockManager, the security manager's secret, and the driver's node directory over Spark's RPC
 * ({@link NodeDirectory.Client}), around the engine-neutral core — the {@link MapOutputServer} (node, pool,
 * output tables, maintenance thread), the {@link RemoteOutputs} its readers cache and the
 * {@link ReadAccounting} they report to. Started once the executor's SparkEnv and BlockManager exist (early,
 * on a thread of its own, or at first use); closed in reverse order.
 *
 * <p>Threads: map tasks publish through {@link #server} on their task threads, reduce tasks read through
 * {@link #remote} and {@link #node} on theirs; the server's maintenance thread checks the node's health and
 * runs the {@link OrphanShuffleCheck} (which calls back {@code dropShuffle} there). Nobody is blamed here:
 * readers blame peers ({@link FetchFailures#fetchFailed}).
 */
final class ExecutorRuntime implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(ExecutorRuntime.class);

    final RdmaShuffleConf conf;
    final String executorId;
    final PeerDirectory directory;
    final MapOutputServer server;
    final RdmaNode node;
    final BufferPool pool;
    final RemoteOutputs remote;
    final ReadAccounting reads;
    private final OrphanShuffleCheck orphans;

    /**
     * @param dropShuffle drops a shuffle the driver no longer knows, as Spark's cleanup message would have
     */
    ExecutorRuntime(RdmaShuffleConf conf, SparkEnv env, java.util.function.IntConsumer dropShuffle) throws IOException {
        this.conf = conf;
        this.executorId = env.executorId();
        // The bound address, when the user chose one, is both where the node listens and what peers learn;
        // one that is not on this host fails the start here, naming the key (no fallback to the host below).
        String host = org.rdmashuffle.transport.BindAddress.resolve(conf.bindAddress(), RdmaShuffleConf.BIND_ADDRESS.name())
                .map(java.net.InetAddress::getHostAddress)
                .orElseGet(() -> env.blockManager().blockManagerId().host());
        byte[] secret = null;
        if (env.securityManager().isAuthenticationEnabled()) {
            secret = env.securityManager().getSecretKey().getBytes(StandardCharsets.UTF_8);
        }
        // The driver's directory first: it answers in a round trip, and an early start that finds it not up
        // yet (see RdmaShuffleManager) has opened nothing to close.
        NodeDirectory.Client client = new NodeDirectory.Client(env.conf(), env.rpcEnv());
        this.directory = client;
        this.server = new MapOutputServer(conf, host, secret, directory, executorId);
        this.node = server.node();
        this.pool = server.pool();
        this.remote = new RemoteOutputs(node, directory, conf.requestTimeoutMs());
        this.reads = new ReadAccounting(executorId);
        this.orphans = new OrphanShuffleCheck(executorId, directory, held -> {
            server.addShufflesTo(held);
            remote.addShufflesTo(held);
        }, server::wasUnregistered, dropShuffle);
        long every = conf.orphanCheckIntervalMs();
        if (every > 0) {
            server.scheduleMaintenance(orphans, every);
        }
        LOG.info("rdma-shuffle executor {} serving on {}: {}", executorId, node.localAddress(),
                server.transportChoice().describe());
        client.reportTransport(executorId, server.transportChoice());
    }

    /** Whether this executor's node can no longer serve or READ (see {@link MapOutputServer#failed()}). */
    boolean failed() {
        return server.failed();
    }

    String failureReason() {
        return server.failureReason();
    }

    /** A task found the node failed: the maintenance thread withdraws it now. */
    void nodeFailureSeen() {
        server.nodeFailureSeen();
    }

    /** Whether this runtime was withdrawn after its node failed and nothing of it is in use any more. */
    boolean retiredAndUnused() {
        return server.retiredAndUnused();
    }

    /** Drops what this executor serves and caches of {@code shuffleId} (Spark cleaned it). */
    void unregisterShuffle(int shuffleId) {
        server.unregisterShuffle(shuffleId);
        remote.forgetShuffle(shuffleId);
    }

    /**
     * What this executor holds and has moved, for operators and tests.
     *
     * @param nodeRestarts nodes this executor started after one failed (the manager counts them)
     */
    RdmaShuffleManager.ExecutorStats stats(long nodeRestarts) {
        return new RdmaShuffleManager.ExecutorStats(executorId, node.stats(), pool.stats(),
                List.copyOf(server.shufflesWithTable()), server.registeredOutputBytes(), reads.controlBytesRead(),
                server.unregisteredOutputs(), server.unregisteredOutputBytes(), reads.receiveMemoryFallbacks(),
                reads.blocksViaEngine(), remote.peersForgotten(), orphans.dropped(), reads.metadataReadsAgain(),
                reads.poolExhaustedFallbacks(), failed() ? 1 : 0, nodeRestarts, reads.hostLocalBlocks(),
                reads.buffersWithheld(), server.transportChoice().provider(), server.transportChoice().device());
    }

    /** Closes the server: its maintenance thread first, then its tables, node and pool. */
    @Override
    public void close() {
        server.close();
    }
}
