package org.rdmashuffle.shuffle;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import org.apache.spark.SparkEnv;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What one executor runs for the shuffle: its node, its receive-buffer pool, its output tables
 * (one per shuffle) and its client of the driver's node directory. Started on first use, after the
 * executor's SparkEnv and BlockManager exist; closed in reverse order.
 */
final class ExecutorRuntime implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(ExecutorRuntime.class);

    final RdmaShuffleConf conf;
    final RdmaNode node;
    final BufferPool pool;
    final NodeDirectory.Client directory;
    final String executorId;
    private final Map<Integer, ShuffleOutputTable> tables = new ConcurrentHashMap<>();
    private final Map<String, RegionDescriptor> remoteTables = new ConcurrentHashMap<>();
    private final Map<Integer, MetadataCache> metadataCaches = new ConcurrentHashMap<>();
    private final LongAdder controlBytesRead = new LongAdder();

    ExecutorRuntime(RdmaShuffleConf conf, SparkEnv env) throws IOException {
        this.conf = conf;
        this.executorId = env.executorId();
        String host = env.blockManager().blockManagerId().host();
        byte[] secret = null;
        if (env.securityManager().isAuthenticationEnabled()) {
            secret = env.securityManager().getSecretKey().getBytes(StandardCharsets.UTF_8);
        }
        NodeOptions options = new NodeOptions(host, host, ControlProtocol.tables(this::localTable), secret);
        this.node = RdmaTransport.open(conf, options);
        BufferPool p = null;
        try {
            p = new BufferPool(BufferPoolOptions.from(conf), node.sinkRegistrar());
            this.directory = new NodeDirectory.Client(env.conf(), env.rpcEnv());
            directory.register(executorId, node.localAddress());
        } catch (RuntimeException e) {
            node.close();
            if (p != null) {
                p.close();
            }
            throw e;
        }
        this.pool = p;
        LOG.info("rdma-shuffle executor {} serving on {}", executorId, node.localAddress());
    }

    private RegionDescriptor localTable(int shuffleId) {
        ShuffleOutputTable t = tables.get(shuffleId);
        return t == null ? null : t.descriptor();
    }

    ShuffleOutputTable table(int shuffleId, int numMaps) throws IOException {
        ShuffleOutputTable t = tables.get(shuffleId);
        if (t != null) {
            return t;
        }
        synchronized (tables) {
            t = tables.get(shuffleId);
            if (t == null) {
                t = new ShuffleOutputTable(node, shuffleId, numMaps);
                tables.put(shuffleId, t);
            }
            return t;
        }
    }

    /** The output table descriptor of {@code shuffleId} at {@code peer}, asked once and cached. */
    RegionDescriptor remoteTable(NodeAddress peer, int shuffleId) throws TransportException {
        String key = peer + "#" + shuffleId;
        RegionDescriptor d = remoteTables.get(key);
        if (d != null) {
            return d;
        }
        RdmaChannel ch = node.connect(peer);
        ByteBuffer reply;
        try {
            reply = ch.call(ControlProtocol.lookupTable(shuffleId)).get(conf.requestTimeoutMs(), TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            throw new TransportException("cannot look up shuffle " + shuffleId + "'s output table at " + peer, e);
        }
        d = ControlProtocol.parseTableReply(reply);
        if (d == null) {
            throw new TransportException(peer + " holds no output table for shuffle " + shuffleId);
        }
        remoteTables.put(key, d);
        return d;
    }

    /** The metadata reducers on this executor have READ for {@code shuffleId}, shared by its fetchers. */
    MetadataCache metadataCache(int shuffleId) {
        return metadataCaches.computeIfAbsent(shuffleId, id -> new MetadataCache());
    }

    /** Counts bytes fetchers READ from output tables and metadata (not block data). */
    void addControlBytesRead(long bytes) {
        controlBytesRead.add(bytes);
    }

    /**
     * Forgets what this executor cached of {@code executorId}'s node for {@code shuffleId} after a
     * failed fetch from it: its address, its table descriptor and its outputs' metadata, so the next
     * attempt (after Spark reran the lost maps) looks everything up afresh.
     */
    void forgetPeer(String executorId, NodeAddress peer, int shuffleId) {
        directory.invalidate(executorId);
        if (peer != null) {
            remoteTables.remove(peer + "#" + shuffleId);
            MetadataCache c = metadataCaches.get(shuffleId);
            if (c != null) {
                c.forget(peer);
            }
        }
    }

    void unregisterShuffle(int shuffleId) {
        ShuffleOutputTable t = tables.remove(shuffleId);
        if (t != null) {
            t.close();
        }
        metadataCaches.remove(shuffleId);
        remoteTables.keySet().removeIf(k -> k.endsWith("#" + shuffleId));
    }

    /** What this executor holds and has moved, for operators and tests. */
    RdmaShuffleManager.ExecutorStats stats() {
        long outputBytes = 0;
        for (ShuffleOutputTable t : tables.values()) {
            outputBytes += t.registeredOutputBytes();
        }
        return new RdmaShuffleManager.ExecutorStats(executorId, node.stats(), pool.stats(), List.copyOf(tables.keySet()),
                outputBytes, controlBytesRead.sum());
    }

    @Override
    public void close() {
        for (Integer id : tables.keySet()) {
            unregisterShuffle(id);
        }
        node.close(); // first: its channels stop and complete their READs before their buffers' memory goes
        pool.close();
    }
}
