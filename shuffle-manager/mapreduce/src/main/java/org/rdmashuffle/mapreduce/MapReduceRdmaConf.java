package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.rdmashuffle.conf.ConfigException;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.BindAddress;
import org.rdmashuffle.transport.TransportException;

/**
 * The transport's configuration for MapReduce, from a Hadoop {@link Configuration}: every
 * {@code spark.shuffle.rdma.<name>} key of {@link RdmaShuffleConf} is set in {@code yarn-site.xml} (the
 * NodeManager's service) or {@code mapred-site.xml} / the job (reducers) as
 * {@code mapreduce.shuffle.rdma.<name>}, validated the same way.
 *
 * <p>One key means something else here: the port. A reducer learns a map's host from its completion event, not
 * the port of that host's service, so every NodeManager's service listens on the same fixed port and reducers
 * connect to it: {@value #PORT} (default {@value #DEFAULT_PORT}; 0 and {@code port.maxRetries} are refused —
 * a service that moved to another port would never be found).
 */
public final class MapReduceRdmaConf {
    /** Prefix of this adapter's keys; {@code mapreduce.shuffle.rdma.<name>} sets {@code spark.shuffle.rdma.<name>}. */
    public static final String PREFIX = "mapreduce.shuffle.rdma.";
    /** The port of every NodeManager's service. */
    public static final String PORT = PREFIX + "port";
    public static final int DEFAULT_PORT = 13570;
    /** The address the NodeManager's service listens on (default all of the host's). MapReduce only. */
    public static final String BIND_HOST = PREFIX + "bindHost";
    /**
     * An address or interface name of this host that the service listens on and reducers' connections leave from
     * ({@code spark.shuffle.rdma.bindAddress} here); errors name this key.
     */
    public static final String BIND_ADDRESS = PREFIX + "bindAddress";
    /**
     * Bytes of map output index records the NodeManager's service holds for reducers' lengths, every job together
     * (24 per reduce per map; the least recently used are dropped and read again from disk when asked), like
     * Hadoop's {@code mapreduce.shuffle.index.cache.limit.bytes}. A size ({@code 10m}, {@code 512k}, bytes), 0
     * holds none. MapReduce only.
     */
    public static final String INDEX_CACHE_MAX_BYTES = PREFIX + "indexCache.maxBytes";
    public static final long DEFAULT_INDEX_CACHE_MAX_BYTES = 10L << 20;
    /**
     * Bytes of output tables the NodeManager's service holds for every running job together: a job's table takes 32
     * bytes of direct memory per map (the map count its reducers claim), from its first REGISTER until it stops. A
     * job whose table would pass it is served over HTTP on that NodeManager. Tables also count against
     * {@code mapreduce.shuffle.rdma.maxRegisteredOutputBytes} when that is set. A size, at least 32 bytes. MapReduce
     * only.
     */
    public static final String MAX_TABLE_BYTES = PREFIX + "maxTableBytes";
    public static final long DEFAULT_MAX_TABLE_BYTES = 16L << 20;
    /** Where a NodeManager keeps map outputs: {@code yarn.nodemanager.local-dirs}. */
    static final String NM_LOCAL_DIRS = "yarn.nodemanager.local-dirs";

    private MapReduceRdmaConf() {
    }

    /**
     * The transport's configuration from {@code hadoop}'s {@code mapreduce.shuffle.rdma.*} keys, recorded as read
     * under {@link #PREFIX} ({@link RdmaShuffleConf#keyName}): the node's log lines name these keys.
     *
     * @throws ConfigException listing every bad or unknown key (also a port of 0 or with retries)
     */
    public static RdmaShuffleConf from(Configuration hadoop) {
        Map<String, String> settings = new HashMap<>();
        for (Map.Entry<String, String> e : hadoop.getPropsWithPrefix(PREFIX).entrySet()) {
            if (e.getKey().equals("bindHost") || e.getKey().equals("indexCache.maxBytes")
                    || e.getKey().equals("maxTableBytes")) {
                continue; // this adapter's own keys
            }
            settings.put(RdmaShuffleConf.PREFIX + e.getKey(), e.getValue());
        }
        settings.put(RdmaShuffleConf.PORT.name(), Integer.toString(port(hadoop)));
        indexCacheMaxBytes(hadoop);
        maxTableBytes(hadoop);
        String retries = settings.get(RdmaShuffleConf.PORT_MAX_RETRIES.name());
        if (retries != null && !retries.trim().equals("0")) {
            throw new ConfigException(List.of(PREFIX + "port.maxRetries=" + retries
                    + ": a NodeManager's service listens on " + PORT + " itself (reducers find it there); only 0"));
        }
        settings.put(RdmaShuffleConf.PORT_MAX_RETRIES.name(), "0");
        if (!hadoop.getTrimmed(BIND_HOST, "").isEmpty() && !hadoop.getTrimmed(BIND_ADDRESS, "").isEmpty()) {
            throw new ConfigException(List.of(BIND_HOST + " and " + BIND_ADDRESS + " are both set: set one (" + BIND_ADDRESS
                    + " also makes reducers' connections leave from that address)"));
        }
        // read under this prefix: its problems, and the node's messages naming a key, name the keys the user set
        return new RdmaShuffleConf(settings, PREFIX);
    }

    /**
     * The address {@link #BIND_ADDRESS} names on this host, or empty when it is not set.
     *
     * @throws TransportException naming {@link #BIND_ADDRESS} when it names no address or interface of this host
     */
    static java.util.Optional<java.net.InetAddress> bindAddress(RdmaShuffleConf rdma) throws TransportException {
        return BindAddress.resolve(rdma.bindAddress(), BIND_ADDRESS);
    }

    /**
     * {@code e} and its causes with every {@code spark.shuffle.rdma.} key in their messages named as the
     * {@code mapreduce.shuffle.rdma.} key the user sets (the transport's errors name the Spark keys), each keeping
     * its stack trace and, in {@code toString}, its original class.
     */
    static IOException namingMapReduceKeys(Throwable e) {
        List<Throwable> chain = new ArrayList<>();
        for (Throwable t = e; t != null && chain.size() < 32 && !chain.contains(t); t = t.getCause()) {
            chain.add(t);
        }
        Renamed renamed = null;
        for (int i = chain.size() - 1; i >= 0; i--) {
            renamed = new Renamed(chain.get(i), renamed);
        }
        return renamed;
    }

    /** An error of the transport, its message naming this adapter's keys. */
    private static final class Renamed extends IOException {
        private static final long serialVersionUID = 1L;
        private final String originalClass;

        Renamed(Throwable original, Renamed cause) {
            super(original.getMessage() == null ? null
                    : original.getMessage().replace(RdmaShuffleConf.PREFIX, PREFIX), cause);
            this.originalClass = original.getClass().getName();
            setStackTrace(original.getStackTrace());
        }

        @Override
        public String toString() {
            return getMessage() == null ? originalClass : originalClass + ": " + getMessage();
        }
    }

    /** {@value #INDEX_CACHE_MAX_BYTES}, checked: a size of 0 or more bytes. */
    public static long indexCacheMaxBytes(Configuration hadoop) {
        String raw = hadoop.getTrimmed(INDEX_CACHE_MAX_BYTES, "");
        if (raw.isEmpty()) {
            return DEFAULT_INDEX_CACHE_MAX_BYTES;
        }
        long bytes;
        try {
            bytes = hadoop.getLongBytes(INDEX_CACHE_MAX_BYTES, DEFAULT_INDEX_CACHE_MAX_BYTES);
        } catch (RuntimeException e) {
            throw new ConfigException(List.of(INDEX_CACHE_MAX_BYTES + "='" + raw + "': not a size (bytes, or 512k, 10m, 1g)"));
        }
        if (bytes < 0) {
            throw new ConfigException(List.of(INDEX_CACHE_MAX_BYTES + "=" + raw + ": a size of 0 or more bytes"));
        }
        return bytes;
    }

    /** {@value #MAX_TABLE_BYTES}, checked: a size of 32 bytes (one map's slot) or more. */
    public static long maxTableBytes(Configuration hadoop) {
        String raw = hadoop.getTrimmed(MAX_TABLE_BYTES, "");
        if (raw.isEmpty()) {
            return DEFAULT_MAX_TABLE_BYTES;
        }
        long bytes;
        try {
            bytes = hadoop.getLongBytes(MAX_TABLE_BYTES, DEFAULT_MAX_TABLE_BYTES);
        } catch (RuntimeException e) {
            throw new ConfigException(List.of(MAX_TABLE_BYTES + "='" + raw + "': not a size (bytes, or 512k, 16m, 1g)"));
        }
        if (bytes < 32) {
            throw new ConfigException(List.of(MAX_TABLE_BYTES + "=" + raw + ": a size of 32 bytes (one map) or more"));
        }
        return bytes;
    }

    /** {@value #PORT}, checked: 1–65535. */
    public static int port(Configuration hadoop) {
        String raw = hadoop.getTrimmed(PORT, Integer.toString(DEFAULT_PORT));
        int port;
        try {
            port = Integer.parseInt(raw);
        } catch (NumberFormatException e) {
            throw new ConfigException(List.of(PORT + "='" + raw + "': not a port number"));
        }
        if (port < 1 || port > 65535) {
            throw new ConfigException(List.of(PORT + "=" + port + ": a fixed port of 1-65535 (reducers connect to it on"
                    + " every NodeManager; 0 would pick one nobody knows)"));
        }
        return port;
    }
}
