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
            removed.put(executorId, Boolean.TRUE);
            nodes.remove(executorId);
        }

        @Override
        public PartialFunction<Object, BoxedUnit> receiveAndReply(RpcCallContext context) {
            return new AbstractPartialFunction<Object, BoxedUnit>() {
                @Override
                public boolean isDefinedAt(Object m) {
                    return m instanceof Register || m instanceof Lookup || m instanceof Forget;
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

        /** Whether Spark removed {@code executorId}, asked of the driver now (its cached node is dropped). */
        public boolean removed(String executorId) {
            cache.remove(executorId);
            return find(executorId).removed();
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
