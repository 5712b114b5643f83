package org.rdmashuffle.shuffle;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.SparkEnv;
import org.rdmashuffle.shuffle.ReadinessReport.Pair;
import org.rdmashuffle.shuffle.ReadinessReport.Placed;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.TransportChoice;

/**
 * The readiness job on an executor, through the rdma-shuffle runtime the executor runs for its shuffles (its
 * node, pool and transport): stage 1 registers a region with a pattern of its own, stage 2 READs every other
 * executor's region ({@link ReadinessReads}), stage 3 deregisters the region. Regions live in a holder keyed
 * by the job's run id between stages; each call here returns what happened and throws nothing a task would
 * fail with.
 */
final class ReadinessExecutor {
    /** Regions of readiness runs registered in this JVM, by run id and executor id. */
    private static final Map<String, Held> HELD = new ConcurrentHashMap<>();

    /** A registered region and what stage 1 reported of it. */
    private record Held(MemoryRegion region, ByteBuffer memory, Placed placed) {
    }

    private ReadinessExecutor() {
    }

    /** This executor's id, for tagging what a task did where it ran. */
    static String executorId() {
        return SparkEnv.get().executorId();
    }

    /**
     * Stage 1: registers {@code regionMiB} MiB filled with this executor's pattern for run {@code runId}, once
     * (a second task of the run here gets the same region).
     */
    static Placed register(String runId, int regionMiB) {
        SparkEnv env = SparkEnv.get();
        String id = env.executorId();
        String host = env.blockManager().blockManagerId().host();
        String key = runId + "/" + id;
        Held held = HELD.get(key);
        if (held != null) {
            return held.placed();
        }
        ExecutorRuntime rt;
        try {
            rt = runtime(env);
        } catch (RuntimeException e) {
            return Placed.failed(id, host, "no rdma-shuffle node: " + e.getMessage());
        }
        if (rt == null) {
            RdmaShuffleManager m = (RdmaShuffleManager) env.shuffleManager();
            String why = m.runtimeFailure();
            return Placed.failed(id, host, "no rdma-shuffle node: " + (why != null ? why
                    : "its node failed or is being replaced (see the executor's log)"));
        }
        TransportChoice c = rt.server.transportChoice();
        ByteBuffer memory;
        MemoryRegion region;
        try {
            memory = ByteBuffer.allocateDirect(ReadinessArguments.bytesOf(regionMiB));
            ReadinessReads.fill(memory, ReadinessReads.seed(runId, id));
            region = rt.node.register(memory, RegionAccess.REMOTE_READ);
        } catch (Exception | OutOfMemoryError e) {
            return Placed.failed(id, host, c.describe() + ", but registering " + regionMiB + " MiB failed: "
                    + ReadinessReads.cause(e));
        }
        var d = region.descriptor();
        var a = rt.node.localAddress();
        Placed placed = new Placed(id, host, a.host(), a.port(), a.provider(), d.address(), d.length(), d.rkey(),
                c.provider(), c.device(), c.api(), c.reason(), c.fellBack(), null);
        Held mine = new Held(region, memory, placed);
        Held raced = HELD.putIfAbsent(key, mine);
        if (raced != null) {
            region.close();
            return raced.placed();
        }
        return placed;
    }

    /**
     * Stage 2: READs {@code reads} MiB from each of {@code peers} but this executor, into buffers of this
     * executor's pool, verifying every byte. A pair that fails says why; nothing is thrown.
     */
    static List<Pair> readPeers(String runId, List<Placed> peers, int reads) {
        String id = executorId();
        List<Pair> out = new ArrayList<>();
        ExecutorRuntime rt;
        String noNode;
        try {
            rt = runtime(SparkEnv.get());
            noNode = rt == null ? "executor " + id + " has no rdma-shuffle node to READ with" : null;
        } catch (RuntimeException e) {
            rt = null;
            noNode = "executor " + id + " has no rdma-shuffle node to READ with: " + e.getMessage();
        }
        for (Placed peer : peers) {
            if (peer.executorId().equals(id)) {
                continue;
            }
            if (noNode != null) {
                out.add(Pair.failed(id, peer.executorId(), noNode));
            } else if (!peer.ok()) {
                out.add(Pair.failed(id, peer.executorId(), "executor " + peer.executorId() + " has no region: "
                        + peer.problem()));
            } else {
                out.add(ReadinessReads.measure(rt, id, peer, ReadinessReads.seed(runId, peer.executorId()), reads));
            }
        }
        return out;
    }

    /** Stage 3: deregisters run {@code runId}'s region on this executor; whether there was one to close. */
    static boolean release(String runId) {
        Held held = HELD.remove(runId + "/" + executorId());
        if (held == null) {
            return false;
        }
        held.region().close();
        return true;
    }

    /**
     * Deregisters run {@code runId}'s region here but leaves it in the holder, so that peers' READs of it
     * fail as they would after an executor lost it (for tests of the matrix's failures).
     */
    static boolean deregisterEarly(String runId) {
        Held held = HELD.get(runId + "/" + executorId());
        if (held == null) {
            return false;
        }
        held.region().close();
        return true;
    }

    /** Regions of readiness runs this JVM holds now (for tests: none once a run ended). */
    static int held() {
        return HELD.size();
    }

    /** The executor's runtime, started if it has not; null when its transport could not start. */
    private static ExecutorRuntime runtime(SparkEnv env) {
        if (!(env.shuffleManager() instanceof RdmaShuffleManager m)) {
            throw new IllegalStateException("the executor's shuffle manager is "
                    + env.shuffleManager().getClass().getName() + ", not " + RdmaShuffleManager.class.getName());
        }
        return m.runtime();
    }
}
