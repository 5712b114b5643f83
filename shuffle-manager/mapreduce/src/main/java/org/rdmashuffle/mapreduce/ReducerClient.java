package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.hadoop.mapreduce.task.reduce.MapHost;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.serve.MapOutputServer;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A reduce task's side of the transport: its node (outgoing connections only, each proving the job's shuffle
 * secret for the job's realm), its pool of registered receive buffers, and which NodeManagers it fetches from
 * over HTTP instead (no service there, the service does not know the job, or it refused) — each said once in a
 * WARN. Shared by the task's fetcher threads; each of them has its own {@link BlockFetcher}.
 *
 * <p>Opened in this order: node, pool. Closed node first (its channels stop and complete their READs before the
 * buffers' memory goes), then the pool — as {@link org.rdmashuffle.shuffle.core.serve.MapOutputServer} does.
 */
final class ReducerClient implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(ReducerClient.class);

    private final RdmaShuffleConf conf;
    private final int servicePort;
    private final RdmaNode node;
    private final BufferPool pool;
    /** NodeManager (host name of its map outputs) → why its outputs are fetched over HTTP. */
    private final Map<String, String> viaHttp = new ConcurrentHashMap<>();

    ReducerClient(RdmaShuffleConf serviceConf, String realm, byte[] secret) throws IOException {
        // The task's own node needs no fixed port: nobody connects to it.
        this.conf = serviceConf.with(Map.of(RdmaShuffleConf.PORT.name(), "0"));
        this.servicePort = serviceConf.port();
        // With a bind address, connections leave from it (the node listens there too, unused).
        String host = MapReduceRdmaConf.bindAddress(serviceConf).map(java.net.InetAddress::getHostAddress)
                .orElse("127.0.0.1");
        NodeOptions options = new NodeOptions(host, host, ControlHandler.NONE, null).withRealm(realm, secret);
        try {
            this.node = RdmaTransport.open(conf, options);
        } catch (IOException | RuntimeException e) {
            throw MapReduceRdmaConf.namingMapReduceKeys(e);
        }
        try {
            this.pool = new BufferPool(BufferPoolOptions.from(conf), node.sinkRegistrar());
        } catch (RuntimeException e) {
            node.close();
            throw e;
        }
    }

    /** The service of the NodeManager serving {@code host}'s outputs (its host name, the fixed port). */
    NodeAddress serviceOf(MapHost host) {
        String name = host.getHostName(); // host:port of its HTTP shuffle
        int colon = name.lastIndexOf(':');
        String h = colon > 0 ? name.substring(0, colon) : name;
        return new NodeAddress(h, servicePort, node.localAddress().provider());
    }

    /** Sends a REGISTER to {@code service} and waits for the answer (at most the request timeout). */
    ByteBuffer call(NodeAddress service, ByteBuffer request) throws IOException, InterruptedException {
        try {
            return node.connect(service).call(request).get(conf.requestTimeoutMs(), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) { // the transport names spark.* keys: name the user's mapreduce.* ones
            throw MapReduceRdmaConf.namingMapReduceKeys(e.getCause());
        } catch (IOException e) {
            throw MapReduceRdmaConf.namingMapReduceKeys(e);
        } catch (TimeoutException e) {
            throw new IOException("no answer from " + service + " within " + conf.requestTimeoutMs() + " ms ("
                    + MapReduceRdmaConf.PREFIX + "requestTimeout)", e);
        }
    }

    BlockFetcher newFetcher(int threads) {
        return new BlockFetcher(node, pool, Math.max(1, conf.maxBytesInFlight() / threads),
                conf.readBlockSizeBytes(), conf.requestTimeoutMs());
    }

    /** Whether this task's node failed (its transport could not go on): its READs fail, nobody else's fault. */
    boolean nodeFailed() {
        return node.failure() != null;
    }

    /** Why {@code host}'s outputs go over HTTP, or null while they are READ. */
    String httpReason(MapHost host) {
        return viaHttp.get(host.getHostName());
    }

    /** From now on {@code host}'s outputs go over HTTP; the first time for a host, one WARN says why. */
    void useHttp(MapHost host, String why) {
        if (viaHttp.putIfAbsent(host.getHostName(), why) == null) {
            LOG.warn("rdma-shuffle: map outputs of {} are fetched with Hadoop's HTTP shuffle from now on: {}",
                    host.getHostName(), why);
        }
    }

    int hostsViaHttp() {
        return viaHttp.size();
    }

    /** The pool's counters (tests: every buffer back once the task's fetchers and this client closed). */
    org.rdmashuffle.pool.BufferPoolStats poolStats() {
        return pool.stats();
    }

    @Override
    public void close() {
        try {
            node.close();
        } finally {
            pool.close();
        }
    }
}
