package org.rdmashuffle.conf;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Every {@code spark.shuffle.rdma.*} key, declared once with its type, default, unit, documentation
 * and check, and a validated, immutable snapshot of their values.
 *
 * <p>Built from a plain string map so that modules below {@code shuffle-manager} need no Spark. All
 * keys are checked together at construction: a {@link ConfigException} names each bad key, the value
 * given and what is accepted. An unknown key under {@code spark.shuffle.rdma.} is an error too, so a
 * misspelt key never silently falls back to its default.
 */
public final class RdmaShuffleConf {
    public static final String PREFIX = "spark.shuffle.rdma.";

    /** Which transport carries the READs. */
    public enum Provider { AUTO, VERBS, TCP }

    /** What to do when the RDMA transport cannot start. */
    public enum Fallback { AUTO, ALWAYS, NEVER }

    /** How much the buffer pool tracks buffers that are never released. */
    public enum LeakDetection { DISABLED, SAMPLED, PARANOID }

    /** How the verbs provider reaches libibverbs and librdmacm. */
    public enum VerbsApi { AUTO, FFM, DISNI }

    private static final List<ConfigKey<?>> KEYS = new ArrayList<>();

    private static <T> ConfigKey<T> declare(ConfigKey<T> key) {
        KEYS.add(key);
        return key;
    }

    public static final ConfigKey<Provider> PROVIDER = declare(ConfigKey.oneOf(PREFIX + "provider",
            Provider.class, Provider.AUTO,
            "Transport provider. `verbs` uses an RDMA NIC (iWARP, RoCE, InfiniBand) through libibverbs and "
                    + "librdmacm (see `verbs.api`); `tcp` emulates one-sided READs over TCP; `auto` picks verbs when "
                    + "an RDMA device exists and one of the verbs APIs can run, else tcp, and logs which it chose and "
                    + "why."));

    public static final ConfigKey<VerbsApi> VERBS_API = declare(ConfigKey.oneOf(PREFIX + "verbs.api",
            VerbsApi.class, VerbsApi.AUTO,
            "How the verbs provider calls rdma-core. `ffm` calls libibverbs and librdmacm directly through Java's "
                    + "foreign function API (Java 22+, nothing to install but the distribution's rdma-core "
                    + "libraries; start the JVM with `--enable-native-access=ALL-UNNAMED`); `disni` goes through "
                    + "DiSNI and its native library libdisni (on `java.library.path`; the only choice on Java 17); "
                    + "`auto` uses `ffm` where it can run and `disni` otherwise, and logs which and why."));

    public static final ConfigKey<Fallback> FALLBACK = declare(ConfigKey.oneOf(PREFIX + "fallback",
            Fallback.class, Fallback.AUTO,
            "When the RDMA transport cannot start: `auto` uses Spark's own sort shuffle and logs one WARN line "
                    + "saying why; `never` fails the application with the reason; `always` never starts the "
                    + "transport and always uses Spark's sort shuffle."));

    public static final ConfigKey<Integer> PORT = declare(ConfigKey.integer(PREFIX + "port", 0, 0, 65535,
            "Port each executor's node listens on; 0 picks a free port."));

    public static final ConfigKey<String> BIND_ADDRESS = declare(ConfigKey.custom(PREFIX + "bindAddress", "address",
            "", "an IP address of this host, or an interface name (e.g. 10.10.0.7, ens1f0, ib0)",
            "Where each node listens (tcp, and rdma_cm for verbs) and the address its peers learn: an IP address of "
                    + "this host or the name of an interface (its first IPv4 address, else its first IPv6 one). Empty: "
                    + "the executor's block manager host. Set it to the RDMA NIC's interface when that NIC sits on its "
                    + "own subnet beside the management network (on YARN the block manager host is the NodeManager's "
                    + "name; on Kubernetes, the pod IP). A name that matches no interface, or an address not on this "
                    + "host, fails the executor's shuffle start with an error naming this key.",
            BindAddressSyntax::check));

    public static final ConfigKey<Integer> VERBS_TOS = declare(ConfigKey.integer(PREFIX + "verbs.tos", -1, -1, 255,
            "verbs: the IP type of service (ToS byte) set on every rdma_cm id before it resolves a route, which "
                    + "RoCE maps to the traffic class (DSCP = ToS >> 2) that PFC and ECN act on; e.g. 106 for DSCP 26. "
                    + "-1 leaves the kernel's default (rdma_cm's `default_roce_tos`). Set through java.lang.foreign (Java 22+); "
                    + "DiSNI has no rdma_set_option and logs one WARN instead. tcp sets it as the sockets' IP_TOS."));

    public static final ConfigKey<Integer> PORT_MAX_RETRIES = declare(ConfigKey.integer(PREFIX + "port.maxRetries",
            16, 0, 1000,
            "With a fixed port: how many following ports to try when it is taken."));

    public static final ConfigKey<Long> MAX_BYTES_IN_FLIGHT = declare(ConfigKey.bytes(PREFIX + "maxBytesInFlight",
            "48m", 64L << 10, 1L << 40, false,
            "Bytes a reduce task may have in outstanding READs at once. When unset, Spark's "
                    + "`spark.reducer.maxSizeInFlight` applies."));

    public static final ConfigKey<Integer> MAX_READS_IN_FLIGHT_PER_PEER = declare(ConfigKey.integer(
            PREFIX + "maxReadsInFlightPerPeer", 64, 1, 4096,
            "READs outstanding on one channel at once. The verbs provider lowers it to "
                    + "`verbs.maxQpReadAtoms` of both ends. Also the READs (slot, metadata and data) one reduce "
                    + "task keeps posted to one peer; its further requests wait in the task, not in the channel."));

    public static final ConfigKey<Integer> SEND_QUEUE_DEPTH = declare(ConfigKey.integer(PREFIX + "sendQueueDepth",
            4096, 16, 1 << 20,
            "READs a channel keeps queued in its preallocated ring beyond those in flight. A post never waits: "
                    + "past the ring, requests queue in an overflow list (one small object each) until there is room."));

    public static final ConfigKey<Long> READ_BLOCK_SIZE = declare(ConfigKey.bytes(PREFIX + "readBlockSize",
            "1m", 4L << 10, 64L << 20, false,
            "Largest single READ; a longer byte range is read as several READs of this size."));

    public static final ConfigKey<Boolean> LOCAL_BLOCKS_FROM_DISK = declare(ConfigKey.bool(
            PREFIX + "localBlocksFromDisk", true,
            "Reduce tasks read blocks their own executor wrote straight from disk. `false` reads them through "
                    + "the node like remote ones (over loopback), which only tests and diagnosis want."));

    public static final ConfigKey<Boolean> START_EARLY = declare(ConfigKey.bool(
            PREFIX + "startEarly", true,
            "Executors start their node, receive-buffer pool and directory registration as soon as they are up, "
                    + "on a thread of their own, and the driver its node directory once the SparkContext is; "
                    + "`false` starts them on the first shuffle task (an application that never shuffles then "
                    + "opens no port)."));

    public static final ConfigKey<Long> MAX_REGION_SIZE = declare(ConfigKey.bytes(PREFIX + "maxRegionSize",
            "1g", 4L << 10, Integer.MAX_VALUE, false,
            "Largest memory region one registration covers; a map output larger than this is registered "
                    + "as several regions, at most 65,536 (a larger output is left to Spark's path, or fails its "
                    + "map task under fallback=never)."));

    public static final ConfigKey<Long> MAX_REGISTERED_OUTPUT_BYTES = declare(ConfigKey.bytes(
            PREFIX + "maxRegisteredOutputBytes", "0", 0, 1L << 50, false,
            "Most bytes of map outputs one executor keeps registered for READs; 0 sets no cap. A map output that "
                    + "would go past it, or that cannot be registered (e.g. `ulimit -l` or `vm.max_map_count` "
                    + "reached), is left to Spark's own shuffle path: reducers fetch it as Spark's reader does. "
                    + "The executor logs one WARN and counts such outputs; with `fallback=never` the map task "
                    + "fails instead."));

    public static final ConfigKey<Long> ORPHAN_CHECK_INTERVAL = declare(ConfigKey.millisOrOff(
            PREFIX + "orphanCheckInterval", "1min", 1000, 86_400_000,
            "How often an executor that holds anything of a shuffle (registered map outputs, their output table, "
                    + "cached metadata of peers' outputs) asks the driver whether Spark still knows that shuffle; "
                    + "0 turns the check off. Spark tells executors once that it cleaned a shuffle, and an "
                    + "executor whose block manager it had just removed (it does so after a fetch failure, until "
                    + "the executor registers again) misses that message: without the check its map outputs stay "
                    + "registered, pinned and mapped, and its shuffle files stay on disk until it exits. A shuffle "
                    + "the driver no longer knows is dropped as Spark's message would have dropped it: one INFO "
                    + "line, counted in the metric `registrations.orphanShufflesDropped`."));

    public static final ConfigKey<Integer> NODE_RESTARTS = declare(ConfigKey.integer(PREFIX + "nodeRestarts", 3, 0, 1000,
            "How many times an executor starts a new node after its node failed (a transport loop or the RDMA "
                    + "device could not go on). A failed node is withdrawn from the driver's directory and closed at "
                    + "once: the executor's reads and writes, and other executors' reads of its outputs, go through "
                    + "Spark's own shuffle path, blaming nobody. Once none of its tasks holds a receive buffer of the "
                    + "failed node any more, a new node starts (new outputs are registered there; older ones stay on "
                    + "Spark's path). 0: never; past the count the executor stays on Spark's path for its life. "
                    + "Counted in the metrics `transport.nodeFailed` and `transport.nodeRestarts`."));

    public static final ConfigKey<Long> POOL_MIN_BUFFER_SIZE = declare(ConfigKey.bytes(
            PREFIX + "pool.minBufferSize", "4k", 512, 1L << 30, true,
            "Smallest size class of the registered buffer pool."));

    public static final ConfigKey<Long> POOL_MAX_BUFFER_SIZE = declare(ConfigKey.bytes(
            PREFIX + "pool.maxBufferSize", "8m", 512, 1L << 30, true,
            "Largest size class of the registered buffer pool; larger requests get a registration of "
                    + "their own, released on return."));

    public static final ConfigKey<Long> POOL_CHUNK_SIZE = declare(ConfigKey.bytes(PREFIX + "pool.chunkSize",
            "32m", 4L << 10, 1L << 30, true,
            "Memory the pool allocates and registers at once; split into buffers of one size class. At "
                    + "least `pool.maxBufferSize`."));

    public static final ConfigKey<Long> POOL_MAX_REGISTERED_BYTES = declare(ConfigKey.bytes(
            PREFIX + "pool.maxRegisteredBytes", "1g", 4L << 10, 1L << 40, false,
            "Hard cap on memory the pool keeps registered. At the cap an acquire waits up to "
                    + "`pool.acquireTimeout`, then fails."));

    public static final ConfigKey<Long> POOL_ACQUIRE_TIMEOUT = declare(ConfigKey.millis(
            PREFIX + "pool.acquireTimeout", "30s", 0, 3_600_000,
            "How long an acquire waits for memory when the pool is at its cap."));

    public static final ConfigKey<PreallocationSpec> POOL_PREALLOCATE = declare(ConfigKey.custom(
            PREFIX + "pool.preallocate", "spec", "", "size:count pairs, comma separated (e.g. 64k:256,1m:32)",
            "Buffers to register when the pool starts, so the first reads pay no registration.",
            raw -> PreallocationSpec.parse(raw)));

    public static final ConfigKey<Integer> POOL_THREAD_CACHE_BUFFERS = declare(ConfigKey.integer(
            PREFIX + "pool.threadCacheBuffers", 16, 0, 1024,
            "Released buffers each thread keeps per size class for its next acquire; 0 disables the caches."));

    public static final ConfigKey<LeakDetection> POOL_LEAK_DETECTION = declare(ConfigKey.oneOf(
            PREFIX + "pool.leakDetection", LeakDetection.class, LeakDetection.SAMPLED,
            "Tracking of buffers dropped without release: `sampled` tracks one acquire in 128, `paranoid` "
                    + "every acquire (with its stack; for tests), `disabled` none."));

    public static final ConfigKey<Long> CONNECT_TIMEOUT = declare(ConfigKey.millis(PREFIX + "connectTimeout",
            "10s", 1, 600_000,
            "Time one connection attempt (TCP connect or RDMA address and route resolution, plus the "
                    + "handshake) may take."));

    public static final ConfigKey<Integer> CONNECT_RETRIES = declare(ConfigKey.integer(PREFIX + "connectRetries",
            3, 0, 100,
            "Further attempts after a failed connect, `connectRetryWait` apart. When unset, Spark's "
                    + "`spark.shuffle.io.maxRetries` applies."));

    public static final ConfigKey<Long> CONNECT_RETRY_WAIT = declare(ConfigKey.millis(
            PREFIX + "connectRetryWait", "1s", 0, 600_000,
            "Pause between connect attempts. When unset, Spark's `spark.shuffle.io.retryWait` applies."));

    public static final ConfigKey<Long> REQUEST_TIMEOUT = declare(ConfigKey.millis(PREFIX + "requestTimeout",
            "120s", 1, 86_400_000,
            "Time a posted READ or control message may stay outstanding before the channel is failed and "
                    + "every request on it completes with a timeout. Counts running time: a pause of this JVM of "
                    + "about 700 ms or more (a long garbage collection, a stopped process) is added to it, as a "
                    + "reader's own pause is not its peer's fault."));

    public static final ConfigKey<Long> MAX_CONTROL_MESSAGE_SIZE = declare(ConfigKey.bytes(
            PREFIX + "maxControlMessageSize", "64k", 1L << 10, 1L << 30, false,
            "Largest two-sided control message (output-table look-ups, READ diagnosis) a node accepts or "
                    + "sends. A body arrives into a buffer that grows with the bytes received, never beyond this; "
                    + "a peer claiming more gets MALFORMED_REQUEST and its connection is closed."));

    public static final ConfigKey<Integer> MAX_CONNECTIONS = declare(ConfigKey.integer(PREFIX + "maxConnections",
            1024, 1, 1 << 20,
            "tcp: connections a node serves at once (handshaking and handshaken). A connection past the cap is "
                    + "refused at once with handshake status 4 (busy) and closed; the connecting side retries. "
                    + "Each handshaken connection holds 80 KiB of direct memory. verbs: also the queue pairs "
                    + "peers may hold on a node at once (connecting or connected; its control connections are "
                    + "capped separately by the same value); a connect request past it is rejected before any "
                    + "queue pair exists, counted in `transport.connectionsRefused`, and the peer's channel "
                    + "retries."));

    public static final ConfigKey<Integer> MAX_HANDSHAKING_CONNECTIONS = declare(ConfigKey.integer(
            PREFIX + "maxHandshakingConnections", 128, 1, 1 << 20,
            "tcp: connections a node keeps that have not finished the handshake (each holds a few hundred bytes "
                    + "of heap and no direct memory). Past it a new connection is refused like one past "
                    + "`maxConnections`, so peers that never authenticate cannot crowd out those that do."));

    public static final ConfigKey<Integer> MAX_CONNECTIONS_PER_ADDRESS = declare(ConfigKey.integer(
            PREFIX + "maxConnectionsPerAddress", 128, 1, 1 << 20,
            "Connections (tcp: handshaking, handshaken and draining after an error reply) and queue pairs "
                    + "(verbs: connecting or connected) a node holds at once from one source address, so that one "
                    + "host cannot take a node's `maxConnections` or the device's queue pairs. A connection past it "
                    + "is refused busy, a verbs connect request rejected before any queue pair exists; both are "
                    + "counted in `transport.connectionsRefused`. An executor opens one channel or queue pair to "
                    + "each peer node (two for a moment while one is replaced), so the default leaves room for 64 "
                    + "executors on one host; raise it for more executors per host, or for hosts that reach the "
                    + "node through one NAT address."));

    /** With {@link #MAX_CONNECTIONS_PER_REALM} 0, how many realms at their share fill {@code maxConnections}. */
    public static final int DEFAULT_REALM_SHARES = 8;

    public static final ConfigKey<Integer> MAX_CONNECTIONS_PER_REALM = declare(ConfigKey.integer(
            PREFIX + "maxConnectionsPerRealm", 0, 0, 1 << 20,
            "tcp, on a node serving many jobs each with its own secret (MapReduce's NodeManager service: set it as "
                    + "`mapreduce.shuffle.rdma.maxConnectionsPerRealm`): connections one job's reducers hold on it "
                    + "at once, so one job cannot take the node's `maxConnections` from the others. 0: an eighth of "
                    + "`maxConnections` (at least 1; 128 of the default 1024), so eight jobs at their share fill the "
                    + "node and fewer leave room for more. A connection past it is refused busy after its handshake; "
                    + "its reducer fetches that host's outputs over HTTP for a while and tries again. No effect on "
                    + "Spark's executors."));

    public static final ConfigKey<Long> IDLE_TIMEOUT = declare(ConfigKey.millis(PREFIX + "idleTimeout",
            "5min", 1000, 86_400_000,
            "tcp: a served connection on which no byte moved in either direction for this long is closed (an "
                    + "abandoned peer, or one that stopped reading its replies). Channels with nothing outstanding "
                    + "send an empty keep-alive message after a third of it, so live peers are never closed. verbs: "
                    + "an accepted queue pair that no keep-alive named for this long is closed (a peer host that lost "
                    + "power sends no disconnect); every channel names its queue pair in a keep-alive over its "
                    + "control connection every third of it, and closes itself, idle, when its peer answered none of "
                    + "two."));

    public static final ConfigKey<Long> FRAME_TIMEOUT = declare(ConfigKey.millis(PREFIX + "frameTimeout",
            "30s", 100, 3_600_000,
            "tcp: once part of a request frame (header or control body) has arrived, the rest must arrive "
                    + "within this long, or the connection is closed."));

    public static final ConfigKey<Integer> VERBS_MAX_READ_ATOMS = declare(ConfigKey.integer(
            PREFIX + "verbs.maxQpReadAtoms", 16, 1, 1024,
            "verbs: RDMA READs one queue pair keeps outstanding; a channel's READs in flight are the smallest of "
                    + "this, the peer's value (exchanged at connection set-up) and `maxReadsInFlightPerPeer`. Must not "
                    + "exceed the device's `max_qp_rd_atom` (`ibv_devinfo -v`; 16 on most NICs, 128 on siw and rxe): "
                    + "libdisni 2.1 connects every queue pair with `initiator_depth` and `responder_resources` equal "
                    + "to the device's `max_qp_rd_atom`, which DiSNI can neither change nor report."));

    public static final ConfigKey<Integer> VERBS_COMPLETION_QUEUE_SIZE = declare(ConfigKey.integer(
            PREFIX + "verbs.completionQueueSize", 4096, 64, 1 << 20,
            "verbs: entries of the node's completion queue, shared by all its queue pairs. A node never has more "
                    + "READs outstanding than this; further posts wait in the channels' queues."));

    public static final ConfigKey<Long> VERBS_STALL_CHECK = declare(ConfigKey.millis(
            PREFIX + "verbs.stallCheck", "2s", 10, 3_600_000,
            "verbs: when a channel's READs make no progress for this long, the peer is asked whether the oldest "
                    + "one is valid; an invalid READ (some devices drop them without a completion) then fails with "
                    + "the peer's reason instead of waiting for `requestTimeout`."));

    public static final ConfigKey<Long> VERBS_POLL_TIMEOUT = declare(ConfigKey.millis(
            PREFIX + "verbs.eventTimeout", "250ms", 10, 10_000,
            "verbs: how long the completion and connection-manager threads block for an event before they "
                    + "look whether the node is closing; bounds how long closing a node takes."));

    public static final ConfigKey<Integer> VERBS_RETRY_COUNT = declare(ConfigKey.integer(
            PREFIX + "verbs.retryCount", 7, 0, 7,
            "verbs: `retry_count` the queue pairs are connected with (rdma_cm): how many times an InfiniBand or "
                    + "RoCE queue pair retransmits after its ACK timeout expires (a lost packet) before its READs "
                    + "fail with a retry-exceeded error and the channel reconnects. 7, the largest, means 7 retries, "
                    + "not unlimited. rdma_cm uses the connecting side's value for both ends; iWARP ignores it "
                    + "(TCP retransmits)."));

    public static final ConfigKey<Integer> VERBS_RNR_RETRY_COUNT = declare(ConfigKey.integer(
            PREFIX + "verbs.rnrRetryCount", 7, 0, 7,
            "verbs: `rnr_retry_count` the queue pairs are connected with (rdma_cm): how many times a queue pair "
                    + "resends a message the peer had no receive buffer for (RNR NAK). 7 means retry without limit "
                    + "(InfiniBand specification). rdma_cm gives each end the value its peer passed. One-sided "
                    + "READs never meet an RNR NAK; iWARP ignores it."));

    private static final List<ConfigKey<?>> ALL = Collections.unmodifiableList(new ArrayList<>(KEYS));

    /** Every declared key, in declaration order. */
    public static List<ConfigKey<?>> keys() {
        return ALL;
    }

    private final Map<ConfigKey<?>, Object> values;
    private final Map<String, String> explicit;
    private final String keyPrefix;

    /** Validates {@code settings} (other prefixes are ignored); throws {@link ConfigException} listing every problem. */
    public RdmaShuffleConf(Map<String, String> settings) {
        this(settings, PREFIX);
    }

    /**
     * Validates {@code settings} (keys under {@link #PREFIX}), which the user set as {@code keyPrefix + <name>}
     * (e.g. {@code mapreduce.shuffle.rdma.}): every problem, and every message naming a key ({@link #keyName}),
     * names the key as the user set it.
     */
    public RdmaShuffleConf(Map<String, String> settings, String keyPrefix) {
        if (!keyPrefix.endsWith(".")) {
            throw new IllegalArgumentException("a key prefix ends with a dot: " + keyPrefix);
        }
        this.keyPrefix = keyPrefix;
        Map<String, ConfigKey<?>> byName = new HashMap<>();
        for (ConfigKey<?> k : ALL) {
            byName.put(k.name(), k);
        }
        List<String> problems = new ArrayList<>();
        Map<String, String> given = new LinkedHashMap<>();
        for (Map.Entry<String, String> e : settings.entrySet()) {
            if (e.getKey().startsWith(PREFIX)) {
                if (!byName.containsKey(e.getKey())) {
                    problems.add(e.getKey() + ": unknown key (known keys are listed in docs/configuration.md)");
                } else {
                    given.put(e.getKey(), e.getValue());
                }
            }
        }
        Map<ConfigKey<?>, Object> parsed = new HashMap<>();
        for (ConfigKey<?> k : ALL) {
            String raw = given.getOrDefault(k.name(), k.defaultValue());
            if (raw == null) {
                problems.add(k.name() + "=null: a value is required; accepted: " + k.accepted());
                continue;
            }
            try {
                parsed.put(k, k.parse(raw));
            } catch (IllegalArgumentException e) {
                problems.add(k.name() + "='" + raw + "': " + e.getMessage() + "; accepted: " + k.accepted());
            }
        }
        this.values = parsed;
        this.explicit = Collections.unmodifiableMap(given);
        if (problems.isEmpty()) {
            crossCheck(problems);
        }
        if (!problems.isEmpty()) {
            throw new ConfigException(problems.stream().map(p -> p.replace(PREFIX, keyPrefix)).toList());
        }
    }

    /** All defaults. */
    public static RdmaShuffleConf defaults() {
        return new RdmaShuffleConf(Map.of());
    }

    private void crossCheck(List<String> problems) {
        long min = get(POOL_MIN_BUFFER_SIZE);
        long max = get(POOL_MAX_BUFFER_SIZE);
        long chunk = get(POOL_CHUNK_SIZE);
        long cap = get(POOL_MAX_REGISTERED_BYTES);
        if (min > max) {
            problems.add(POOL_MIN_BUFFER_SIZE.name() + "=" + ByteSizes.format(min) + " is larger than "
                    + POOL_MAX_BUFFER_SIZE.name() + "=" + ByteSizes.format(max) + "; accepted: at most the largest");
        }
        if (chunk < max) {
            problems.add(POOL_CHUNK_SIZE.name() + "=" + ByteSizes.format(chunk) + " is smaller than "
                    + POOL_MAX_BUFFER_SIZE.name() + "=" + ByteSizes.format(max)
                    + "; accepted: at least the largest buffer size");
        }
        if (cap < chunk) {
            problems.add(POOL_MAX_REGISTERED_BYTES.name() + "=" + ByteSizes.format(cap) + " is smaller than "
                    + POOL_CHUNK_SIZE.name() + "=" + ByteSizes.format(chunk) + "; accepted: at least one chunk");
        }
        PreallocationSpec spec = get(POOL_PREALLOCATE);
        long needed = 0;
        for (PreallocationSpec.Entry e : spec.entries()) {
            if (e.sizeBytes() < min || e.sizeBytes() > max) {
                problems.add(POOL_PREALLOCATE.name() + "='" + spec + "': size " + ByteSizes.format(e.sizeBytes())
                        + " is not a size class; accepted: powers of two from " + ByteSizes.format(min) + " to "
                        + ByteSizes.format(max));
            } else {
                long perChunk = chunk / e.sizeBytes();
                needed += ((e.count() + perChunk - 1) / perChunk) * chunk;
            }
        }
        if (needed > cap) {
            problems.add(POOL_PREALLOCATE.name() + "='" + spec + "' needs " + ByteSizes.format(needed)
                    + " of registered chunks; accepted: at most " + POOL_MAX_REGISTERED_BYTES.name() + "="
                    + ByteSizes.format(cap));
        }
    }

    /** The value of {@code key}: the one given, or its default. */
    @SuppressWarnings("unchecked")
    public <T> T get(ConfigKey<T> key) {
        Object v = values.get(key);
        if (v == null && !values.containsKey(key)) {
            throw new IllegalArgumentException("not a declared key: " + key.name());
        }
        return (T) v;
    }

    /** Whether {@code key} was given explicitly (rather than defaulted). */
    public boolean isSet(ConfigKey<?> key) {
        return explicit.containsKey(key.name());
    }

    /** The explicitly given {@code spark.shuffle.rdma.*} settings, for handing on to another process. */
    public Map<String, String> explicitSettings() {
        return explicit;
    }

    /** This configuration with {@code overrides} applied on top; validated again. */
    public RdmaShuffleConf with(Map<String, String> overrides) {
        Map<String, String> merged = new HashMap<>(explicit);
        merged.putAll(overrides);
        return new RdmaShuffleConf(merged, keyPrefix);
    }

    /** The prefix of the keys as the user set them: {@link #PREFIX}, or another adapter's (the settings' keys keep PREFIX). */
    public String keyPrefix() {
        return keyPrefix;
    }

    /** {@code message} with every key under {@link #PREFIX} named as the user set it (under {@link #keyPrefix()}). */
    public String naming(String message) {
        return message == null || keyPrefix.equals(PREFIX) ? message : message.replace(PREFIX, keyPrefix);
    }

    /** {@code key}'s name as the user set it (under {@link #keyPrefix()}), for messages. */
    public String keyName(ConfigKey<?> key) {
        return keyName(key.name().substring(PREFIX.length()));
    }

    /** The key {@code suffix} (e.g. {@code "idleTimeout"}) as the user set it, for messages. */
    public String keyName(String suffix) {
        return keyPrefix + suffix;
    }

    /** The configured bind address or interface name; empty for the default (the block manager host). */
    public String bindAddress() { return get(BIND_ADDRESS); }

    /** The ToS byte for rdma_cm ids (and tcp sockets), or -1 for the kernel's default. */
    public int verbsTos() { return get(VERBS_TOS); }

    /** Most bytes of map outputs an executor keeps registered; 0: no cap. */
    public long maxRegisteredOutputBytes() { return get(MAX_REGISTERED_OUTPUT_BYTES); }

    /** Connections one realm may hold: {@link #MAX_CONNECTIONS_PER_REALM}, or an eighth of maxConnections for 0. */
    public int maxConnectionsPerRealm() {
        int share = get(MAX_CONNECTIONS_PER_REALM);
        return share > 0 ? share : Math.max(1, maxConnections() / DEFAULT_REALM_SHARES);
    }

    // The other keys' values, typed.
    public Provider provider() { return get(PROVIDER); }
    public Fallback fallback() { return get(FALLBACK); }
    public int port() { return get(PORT); }
    public int portMaxRetries() { return get(PORT_MAX_RETRIES); }
    public long maxBytesInFlight() { return get(MAX_BYTES_IN_FLIGHT); }
    public int maxReadsInFlightPerPeer() { return get(MAX_READS_IN_FLIGHT_PER_PEER); }
    public int sendQueueDepth() { return get(SEND_QUEUE_DEPTH); }
    public int readBlockSizeBytes() { return Math.toIntExact(get(READ_BLOCK_SIZE)); }
    public boolean localBlocksFromDisk() { return get(LOCAL_BLOCKS_FROM_DISK); }
    public boolean startEarly() { return get(START_EARLY); }
    public int maxRegionSizeBytes() { return Math.toIntExact(get(MAX_REGION_SIZE)); }
    public long orphanCheckIntervalMs() { return get(ORPHAN_CHECK_INTERVAL); }
    public int nodeRestarts() { return get(NODE_RESTARTS); }
    public int poolMinBufferSizeBytes() { return Math.toIntExact(get(POOL_MIN_BUFFER_SIZE)); }
    public int poolMaxBufferSizeBytes() { return Math.toIntExact(get(POOL_MAX_BUFFER_SIZE)); }
    public int poolChunkSizeBytes() { return Math.toIntExact(get(POOL_CHUNK_SIZE)); }
    public long poolMaxRegisteredBytes() { return get(POOL_MAX_REGISTERED_BYTES); }
    public long poolAcquireTimeoutMs() { return get(POOL_ACQUIRE_TIMEOUT); }
    public PreallocationSpec poolPreallocate() { return get(POOL_PREALLOCATE); }
    public int poolThreadCacheBuffers() { return get(POOL_THREAD_CACHE_BUFFERS); }
    public LeakDetection poolLeakDetection() { return get(POOL_LEAK_DETECTION); }
    public long connectTimeoutMs() { return get(CONNECT_TIMEOUT); }
    public int connectRetries() { return get(CONNECT_RETRIES); }
    public long connectRetryWaitMs() { return get(CONNECT_RETRY_WAIT); }
    public long requestTimeoutMs() { return get(REQUEST_TIMEOUT); }
    public int verbsMaxQpReadAtoms() { return get(VERBS_MAX_READ_ATOMS); }
    public int verbsCompletionQueueSize() { return get(VERBS_COMPLETION_QUEUE_SIZE); }
    public long verbsStallCheckMs() { return get(VERBS_STALL_CHECK); }
    public VerbsApi verbsApi() { return get(VERBS_API); }
    public int verbsEventTimeoutMs() { return (int) (long) get(VERBS_POLL_TIMEOUT); }
    public int verbsRetryCount() { return get(VERBS_RETRY_COUNT); }
    public int verbsRnrRetryCount() { return get(VERBS_RNR_RETRY_COUNT); }
    public int maxControlMessageSizeBytes() { return Math.toIntExact(get(MAX_CONTROL_MESSAGE_SIZE)); }
    public int maxConnections() { return get(MAX_CONNECTIONS); }
    public int maxHandshakingConnections() { return get(MAX_HANDSHAKING_CONNECTIONS); }
    public int maxConnectionsPerAddress() { return get(MAX_CONNECTIONS_PER_ADDRESS); }
    public long idleTimeoutMs() { return get(IDLE_TIMEOUT); }
    public long frameTimeoutMs() { return get(FRAME_TIMEOUT); }
}
