package org.rdmashuffle.shuffle;

import com.codahale.metrics.Gauge;
import com.codahale.metrics.MetricRegistry;
import java.util.Optional;
import java.util.function.Supplier;
import java.util.function.ToLongFunction;
import org.apache.spark.metrics.source.Source;

/**
 * rdma-shuffle's metrics in Spark's {@code MetricsSystem} (source name {@value #NAME}), registered on
 * the driver and on every executor by the shuffle manager, so every sink configured for Spark —
 * the JSON and Prometheus servlets of the driver's UI, JMX, CSV, Graphite — reports them. Gauges read
 * one snapshot of the executor's counters, taken at most every {@link #SNAPSHOT_NANOS} (sinks read
 * every gauge at once); an executor whose transport has not started (or could not) reports zeros,
 * {@code transport.started = 0} and an empty {@code transport.provider}.
 */
final class RdmaShuffleSource implements Source {
    static final String NAME = "rdmaShuffle";
    private static final long SNAPSHOT_NANOS = 200_000_000L;

    private final MetricRegistry registry = new MetricRegistry();
    private final Supplier<Optional<RdmaShuffleManager.ExecutorStats>> stats;
    private volatile RdmaShuffleManager.ExecutorStats snapshot;
    private volatile long snapshotAt;

    /**
     * @param stats this process's executor counters (empty until its transport started)
     * @param directoryNodes on the driver: executors whose nodes its directory holds; null elsewhere
     * @param driverFallback on the driver: 1 when every shuffle of the application uses Spark's sort shuffle
     */
    RdmaShuffleSource(Supplier<Optional<RdmaShuffleManager.ExecutorStats>> stats, Supplier<Integer> directoryNodes,
                      long driverFallback) {
        this.stats = stats;
        gauge("transport.started", s -> 1);
        // Which transport: a string each (many sinks drop those) and the same as a number.
        text("transport.provider", RdmaShuffleManager.ExecutorStats::provider);
        text("transport.device", RdmaShuffleManager.ExecutorStats::device);
        gauge("transport.verbs", s -> "verbs".equals(s.provider()) ? 1 : 0);
        // The transport's counters.
        gauge("transport.readsPosted", s -> s.node().readsPosted());
        gauge("transport.readsCompleted", s -> s.node().readsCompleted());
        gauge("transport.readsFailed", s -> s.node().readsFailed());
        gauge("transport.bytesRead", s -> s.node().bytesRead());
        gauge("transport.readsServed", s -> s.node().readsServed());
        gauge("transport.readsRefused", s -> s.node().readsRefused());
        gauge("transport.bytesServed", s -> s.node().bytesServed());
        gauge("transport.openChannels", s -> s.node().openChannels());
        gauge("transport.channelsOpened", s -> s.node().channelsOpened());
        gauge("transport.reconnects", s -> s.node().reconnects());
        gauge("transport.connectionsRefused", s -> s.node().connectionsRefused());
        gauge("transport.connectionsEvictedIdle", s -> s.node().connectionsEvictedIdle());
        gauge("transport.nodeFailed", s -> s.nodeFailed());
        gauge("transport.nodeRestarts", s -> s.nodeRestarts());
        // Registered memory: served map outputs and output tables, and the receive pool.
        gauge("registrations.regions", s -> s.node().registeredRegions());
        gauge("registrations.bytes", s -> s.node().registeredBytes());
        gauge("registrations.regionsLeaked", s -> s.node().regionsLeaked());
        gauge("registrations.outputBytes", s -> s.registeredOutputBytes());
        gauge("registrations.shuffles", s -> s.shuffles().size());
        gauge("registrations.outputsLeftToSpark", s -> s.unregisteredOutputs());
        gauge("registrations.outputBytesLeftToSpark", s -> s.unregisteredOutputBytes());
        gauge("pool.registeredBytes", s -> s.pool().registeredBytes());
        gauge("pool.inUseBytes", s -> s.pool().inUseBytes());
        gauge("pool.inUseBuffers", s -> s.pool().inUseBuffers());
        gauge("pool.acquires", s -> s.pool().acquires());
        gauge("pool.misses", s -> s.pool().misses());
        gauge("pool.waits", s -> s.pool().waits());
        gauge("pool.timeouts", s -> s.pool().timeouts());
        gauge("pool.hostRefusals", s -> s.pool().hostRefusals());
        gauge("pool.leaksDetected", s -> s.pool().leaksDetected());
        // What readers took through Spark's own path instead of READs.
        gauge("fallback.receiveMemoryTasks", s -> s.receiveMemoryFallbacks());
        gauge("fallback.blocksViaSpark", s -> s.blocksViaSpark());
        gauge("fallback.poolExhaustedTasks", s -> s.poolExhaustedTasks());
        gauge("fetch.hostLocalBlocks", s -> s.hostLocalBlocks());
        gauge("fetch.peersForgotten", s -> s.peersForgotten());
        gauge("fetch.metadataReadsAgain", s -> s.metadataReadsAgain());
        gauge("fetch.buffersWithheld", s -> s.buffersWithheld());
        gauge("registrations.orphanShufflesDropped", s -> s.orphanShufflesDropped());
        if (directoryNodes != null) {
            registry.register("driver.directoryNodes", (Gauge<Long>) () -> (long) directoryNodes.get());
            registry.register("driver.everyShuffleViaSpark", (Gauge<Long>) () -> driverFallback);
        }
    }

    private void gauge(String name, ToLongFunction<RdmaShuffleManager.ExecutorStats> value) {
        registry.register(name, (Gauge<Long>) () -> {
            RdmaShuffleManager.ExecutorStats s = current();
            return s == null ? 0L : value.applyAsLong(s);
        });
    }

    /** A string gauge: empty before the transport started (and when it could not). */
    private void text(String name, java.util.function.Function<RdmaShuffleManager.ExecutorStats, String> value) {
        registry.register(name, (Gauge<String>) () -> {
            RdmaShuffleManager.ExecutorStats s = current();
            return s == null ? "" : value.apply(s);
        });
    }

    private RdmaShuffleManager.ExecutorStats current() {
        long now = System.nanoTime();
        RdmaShuffleManager.ExecutorStats s = snapshot;
        if (s == null || now - snapshotAt > SNAPSHOT_NANOS) {
            try {
                s = stats.get().orElse(null);
            } catch (RuntimeException e) { // a sink must not fail its whole report: keep the last snapshot
                snapshotAt = now;
                return s;
            }
            snapshot = s;
            snapshotAt = now;
        }
        return s;
    }

    @Override
    public String sourceName() {
        return NAME;
    }

    @Override
    public MetricRegistry metricRegistry() {
        return registry;
    }
}
