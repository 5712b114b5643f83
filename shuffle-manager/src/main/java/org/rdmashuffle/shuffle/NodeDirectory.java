package org.rdmashuffle.shuffle;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.SparkConf;
import org.apache.spark.rpc.RpcCallContext;
import org.apache.spark.rpc.RpcEndpoint;
import org.apache.spark.rpc.RpcEndpointRef;
import org.apache.spark.rpc.RpcEnv;
import org.apache.spark.util.RpcUtils$;
import org.rdmashuffle.transport.NodeAddress;
import scala.Function1;
import scala.PartialFunction;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractPartialFunction;
import scala.runtime.BoxedUnit;

/**
 * The driver's directory of executors' RDMA nodes, on Spark's own RPC: an endpoint on the driver
 * (started by the driver's shuffle manager) and a client on each executor that registers its node
 * once and looks peers up on demand (cached). Spark's RPC already reaches the driver from every
 * executor on every cluster manager, so no address has to be handed out of band.
 */
public final class NodeDirectory {
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(NodeDirectory.class);
    public static final String ENDPOINT_NAME = "rdma-shuffle-node-directory";

    private NodeDirectory() {
    }

    /** An executor announces its node. */
    public record Register(String executorId, byte[] address) implements Serializable {
        private static final long serialVersionUID = 1L;
    }

    /**
     * Where is that executor's node? Replied with its encoded address, an empty array when the driver
     * knows none, or {@link #REMOVED} when Spark removed the executor.
     */
    public record Lookup(String executorId) implements Serializable {
        private static final long serialVersionUID = 1L;
    }

    /** The reply to a {@link Lookup} of an executor Spark removed (one byte: no encoded address is that short). */
    static final byte[] REMOVED = {'R'};

    /** What the driver knows of an executor's node: its address, or none, and whether Spark removed it. */
    public record Found(NodeAddress address, boolean removed) {
    }

    /**
     * Which executors did Spark remove, from the {@code from}-th on? Replied with a {@code String[]}: the
     * index of the first one (in decimal), then their ids (at most {@link Endpoint#MAX_REMOVED_PER_REPLY}).
     * Replies are JDK types only: an executor deserialises them with Spark's own class loader, which does
     * not see the plugin when it came with {@code --jars}.
     */
    public record RemovedSince(int from) implements Serializable {
        private static final long serialVersionUID = 1L;
    }

    /** An executor is gone. */
    public record Forget(String executorId) implements Serializable {
        private static final long serialVersionUID = 1L;
    }

    /** The driver side. */
    public static final class Endpoint implements RpcEndpoint {
        private final RpcEnv rpcEnv;
        private final Map<String, byte[]> nodes = new ConcurrentHashMap<>();
        /** Executors Spark removed (bounded: ids are short, and past the bound only the oldest are forgotten). */
        private final Map<String, Boolean> removed = java.util.Collections.synchronizedMap(
                new java.util.LinkedHashMap<>(16, 0.75f, false) {
                    @Override
                    protected boolean removeEldestEntry(Map.Entry<String, Boolean> eldest) {
                        return size() > MAX_REMOVED;
                    }
                });
        private static final int MAX_REMOVED = 100_000;
        static final int MAX_REMOVED_PER_REPLY = 10_000;
        /** Removed executors in the order Spark removed them, for {@link RemovedSince} (bounded as above). */
        private final java.util.List<String> removedLog = new java.util.concurrent.CopyOnWriteArrayList<>();

        public Endpoint(RpcEnv rpcEnv) {
            this.rpcEnv = rpcEnv;
        }

        /** Starts the endpoint on {@code rpcEnv} (the driver's). */
        public static Endpoint start(RpcEnv rpcEnv) {
            Endpoint e = new Endpoint(rpcEnv);
            rpcEnv.setupEndpoint(ENDPOINT_NAME, e);
            return e;
        }

        @Override
        public RpcEnv rpcEnv() {
            return rpcEnv;
        }

        public int size() {
            return nodes.size();
        }

        /**
         * Spark removed {@code executorId} (killed, lost, released by dynamic allocation or decommissioned):
         * lookups of it answer {@link #REMOVED} from now on, so readers do not connect to a node that is gone.
         */
        public void executorRemoved(String executorId) {
            if (removed.put(executorId, Boolean.TRUE) == null && removedLog.size() < MAX_REMOVED) {
                removedLog.add(executorId);
            }
            nodes.remove(executorId);
        }

        private String[] removedSince(int from) {
            int n = removedLog.size();
            int start = Math.max(0, Math.min(from, n));
            int end = Math.min(n, start + MAX_REMOVED_PER_REPLY);
            String[] reply = new String[1 + end - start];
            reply[0] = Integer.toString(start);
            for (int i = start; i < end; i++) {
                reply[1 + i - start] = removedLog.get(i);
            }
            return reply;
        }

        @Override
        public PartialFunction<Object, BoxedUnit> receiveAndReply(RpcCallContext context) {
            return new AbstractPartialFunction<Object, BoxedUnit>() {
                @Override
                public boolean isDefinedAt(Object m) {
                    return m instanceof Register || m instanceof Lookup || m instanceof Forget
                            || m instanceof RemovedSince;
                }

                @Override
                public <A1, B1> B1 applyOrElse(A1 m, Function1<A1, B1> otherwise) {
                    if (m instanceof Register r) {
                        NodeAddress.decode(ByteBuffer.wrap(r.address())); // refuse garbage early
                        if (!removed.containsKey(r.executorId())) { // a late registration of a removed one
                            nodes.put(r.executorId(), r.address().clone());
                        }
                        context.reply(Boolean.TRUE);
                    } else if (m instanceof Lookup l) {
                        byte[] a = nodes.get(l.executorId());
                        context.reply(a != null ? a : removed.containsKey(l.executorId()) ? REMOVED : new byte[0]);
                    } else if (m instanceof RemovedSince r) {
                        context.reply(removedSince(r.from()));
                    } else if (m instanceof Forget f) {
                        context.reply(nodes.remove(f.executorId()) != null);
                    } else {
                        return otherwise.apply(m);
                    }
                    @SuppressWarnings("unchecked")
                    B1 unit = (B1) BoxedUnit.UNIT;
                    return unit;
                }
            };
        }
    }

    /** The executor side: a reference to the driver's endpoint and a cache of looked-up nodes. */
    public static final class Client {
        private final RpcEndpointRef driver;
        private final Map<String, NodeAddress> cache = new ConcurrentHashMap<>();
        /** Executors Spark removed that this client has heard of, and how many of the driver's list it has. */
        private final java.util.Set<String> removedKnown = ConcurrentHashMap.newKeySet();
        private int removedSeen;
        private long removedAskedNanos;
        private static final long REMOVED_REFRESH_NANOS = 1_000_000_000L;

        public Client(SparkConf conf, RpcEnv rpcEnv) {
            this.driver = RpcUtils$.MODULE$.makeDriverRef(ENDPOINT_NAME, conf, rpcEnv);
        }

        public void register(String executorId, NodeAddress address) {
            driver.askSync(new Register(executorId, address.encode()), ClassTag$.MODULE$.Any());
            cache.put(executorId, address);
        }

        /** The node of {@code executorId}, or null when the driver knows none (or Spark removed it). */
        public NodeAddress lookup(String executorId) {
            return find(executorId).address();
        }

        /** What the driver knows of {@code executorId}'s node (cached once found). */
        public Found find(String executorId) {
            NodeAddress a = cache.get(executorId);
            if (a != null) {
                return new Found(a, false);
            }
            byte[] enc = (byte[]) driver.askSync(new Lookup(executorId), ClassTag$.MODULE$.Any());
            if (enc.length == 0) {
                return new Found(null, false);
            }
            if (java.util.Arrays.equals(enc, REMOVED)) {
                return new Found(null, true);
            }
            a = NodeAddress.decode(ByteBuffer.wrap(enc));
            cache.put(executorId, a);
            return new Found(a, false);
        }

        /**
         * Learns the executors Spark removed since this client last asked, at most once a second (one small
         * RPC to the driver): readers call it before choosing how to fetch when an external shuffle service
         * serves removed executors' files, so they do not try to connect to nodes that are gone.
         */
        public void refreshRemoved() {
            synchronized (removedKnown) {
                long now = System.nanoTime();
                if (removedAskedNanos != 0 && now - removedAskedNanos < REMOVED_REFRESH_NANOS) {
                    return;
                }
                removedAskedNanos = now;
                for (;;) {
                    String[] r;
                    try {
                        r = (String[]) driver.askSync(new RemovedSince(removedSeen), ClassTag$.MODULE$.Any());
                    } catch (RuntimeException e) { // readers then learn of a removal when connecting fails
                        LOG.debug("cannot ask the driver which executors were removed", e);
                        return;
                    }
                    for (int i = 1; i < r.length; i++) {
                        removedKnown.add(r[i]);
                        cache.remove(r[i]);
                    }
                    removedSeen = Integer.parseInt(r[0]) + r.length - 1;
                    if (r.length - 1 < Endpoint.MAX_REMOVED_PER_REPLY) {
                        return;
                    }
                }
            }
        }

        /** Whether this client has heard that Spark removed {@code executorId} (see {@link #refreshRemoved()}). */
        public boolean knownRemoved(String executorId) {
            return removedKnown.contains(executorId);
        }

        /** Whether Spark removed {@code executorId}, asked of the driver now (its cached node is dropped). */
        public boolean removed(String executorId) {
            cache.remove(executorId);
            boolean gone;
            try {
                gone = find(executorId).removed();
            } catch (RuntimeException e) {
                LOG.debug("cannot ask the driver whether executor {} was removed", executorId, e);
                return false;
            }
            if (gone) {
                removedKnown.add(executorId);
            }
            return gone;
        }

        /** Drops a cached entry (after a fetch failure, the executor may have restarted elsewhere). */
        public void invalidate(String executorId) {
            cache.remove(executorId);
        }

        public void forget(String executorId) {
            cache.remove(executorId);
            driver.askSync(new Forget(executorId), ClassTag$.MODULE$.Any());
        }
    }
}
