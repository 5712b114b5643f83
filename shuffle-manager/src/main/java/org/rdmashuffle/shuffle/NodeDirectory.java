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

    /** Where is that executor's node? Replied with its encoded address, or an empty array. */
    public record Lookup(String executorId) implements Serializable {
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
                        nodes.put(r.executorId(), r.address().clone());
                        context.reply(Boolean.TRUE);
                    } else if (m instanceof Lookup l) {
                        byte[] a = nodes.get(l.executorId());
                        context.reply(a == null ? new byte[0] : a);
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

        /** The node of {@code executorId}, or null when the driver knows none. */
        public NodeAddress lookup(String executorId) {
            NodeAddress a = cache.get(executorId);
            if (a != null) {
                return a;
            }
            byte[] enc = (byte[]) driver.askSync(new Lookup(executorId), ClassTag$.MODULE$.Any());
            if (enc.length == 0) {
                return null;
            }
            a = NodeAddress.decode(ByteBuffer.wrap(enc));
            cache.put(executorId, a);
            return a;
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
