package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.task.reduce.MapHost;
import org.apache.hadoop.mapreduce.task.reduce.MapOutput;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapState;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Block;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Expected;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Request;
import org.rdmashuffle.shuffle.core.fetch.FailedReadClassifier;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.shuffle.core.fetch.ReadOutcome;
import org.rdmashuffle.transport.NodeAddress;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One of a reduce task's fetcher threads: takes a NodeManager with known map outputs from Hadoop's scheduler,
 * asks its service to register them ({@link RegisterProtocol}), READs this reducer's partition of each into
 * pooled buffers with its own {@link BlockFetcher}, and hands the bytes to Hadoop's merge manager (in memory or
 * on disk, as it decides; the IFile checksum and any codec are checked and undone there, as for HTTP).
 *
 * <p>What to do about a failed READ or block is decided by the core's {@link FailedReadClassifier}; here it is
 * only turned into Hadoop's words ({@link #dataFault}): a map output whose bytes are bad (a bad checksum, bytes
 * that do not decode) is reported to the scheduler as that map's fetch failure ({@code copyFailed} and
 * {@code hostFailed}, read error), which tells the ApplicationMaster as Hadoop's fetcher does, so the map is
 * rerun; a READ that failed or timed out, a NodeManager whose service went to HTTP meanwhile, or this task's own
 * node failing blames no map: the host goes to Hadoop's own HTTP fetcher, as do outputs the service leaves
 * unregistered and every output of a NodeManager without a service (or one that refuses this job). This task's
 * buffers running out — also while the merge manager reads a streamed block — blames nobody either (HTTP serves
 * the host), and neither does the reducer stopping this thread.
 *
 * <p>Buffers: a block's pooled buffer is given back when the block is closed, right after the merge manager
 * copied its bytes; the fetcher is closed (giving back what is still in flight) when the thread ends or a READ
 * times out.
 */
final class RdmaFetcher<K, V> extends Thread {
    private static final Logger LOG = LoggerFactory.getLogger(RdmaFetcher.class);

    /** A reserved map output whose partition is being READ. */
    private record Pending<K, V>(TaskAttemptID mapId, MapOutput<K, V> out, MapState state, long startMillis) {
    }

    private final RdmaShuffle<K, V> shuffle;
    private final int id;
    private final String clientProblem;
    private final ReducerClient client;
    private HttpFetcher<K, V> http;
    private BlockFetcher fetcher;
    private volatile boolean stopped;
    /** Whether this turn of the current host already counted a host failure. */
    private boolean hostFailedThisTurn;
    /** The host of this turn: a host sent to HTTP meanwhile (by any fetcher thread) is what "withdrew" means here. */
    private MapHost currentHost;
    private final FailedReadClassifier classifier;

    RdmaFetcher(RdmaShuffle<K, V> shuffle, int id, ReducerClient client, String clientProblem) {
        super("rdma-shuffle-fetcher-" + id);
        setDaemon(true);
        this.shuffle = shuffle;
        this.id = id;
        this.client = client;
        this.clientProblem = clientProblem;
        this.classifier = new FailedReadClassifier(() -> client != null && client.nodeFailed(),
                origin -> currentHost != null && (client.httpReason(currentHost) != null
                        || client.busyReason(currentHost) != null), true);
    }

    /**
     * Whether the core's outcome for {@code f} is a fault of the map's data, which Hadoop's fetcher reports with
     * {@code copyFailed}: a peer blamed for bytes that do not decode. Every other outcome — a READ that failed or
     * timed out, a size or window that failed, the host gone to HTTP, this task's node failed — is a transport
     * fault: the map goes over HTTP, whose retries and reports decide about it.
     */
    static boolean dataFault(ReadOutcome outcome, FetchFailure f) {
        return outcome == ReadOutcome.BLAME_PEER && f.kind() == FetchFailure.Kind.CORRUPT;
    }

    @Override
    public void run() {
        try {
            while (!stopped) {
                shuffle.merger().waitForResource();
                MapHost host = shuffle.scheduler().getHost();
                try {
                    shuffle.metrics().threadBusy();
                    fetchFrom(host);
                } finally {
                    shuffle.scheduler().freeHost(host);
                    shuffle.metrics().threadFree();
                }
            }
        } catch (InterruptedException e) {
            // shut down
        } catch (Throwable t) {
            shuffle.reportException(t);
        } finally {
            closeFetcher();
        }
    }

    void shutDown() throws InterruptedException {
        stopped = true;
        interrupt();
        join(5000);
    }

    private void fetchFrom(MapHost host) throws IOException, InterruptedException {
        hostFailedThisTurn = false;
        currentHost = host;
        String why = client == null ? clientProblem : client.httpReason(host);
        if (why == null && client != null) {
            why = client.busyReason(host); // busy a moment ago: HTTP in this turn, READs again after the wait
        }
        if (why != null) {
            overHttp(host, host.getNumKnownMapOutputs());
            return;
        }
        // Hadoop's scheduler hands out 20 of a host's maps at a time (its HTTP fetcher's batch): take what the host
        // has, up to a REGISTER's worth, so that one REGISTER names them all and their READs leave together.
        List<TaskAttemptID> maps = new ArrayList<>(shuffle.scheduler().getMapsForHost(host));
        while (!maps.isEmpty() && maps.size() < RegisterProtocol.MAX_MAPS_PER_REQUEST
                && host.getNumKnownMapOutputs() > 0) {
            List<TaskAttemptID> more = shuffle.scheduler().getMapsForHost(host);
            if (more.isEmpty()) {
                break;
            }
            maps.addAll(more);
        }
        if (maps.isEmpty()) {
            return;
        }
        Deque<TaskAttemptID> left = new ArrayDeque<>(maps);
        List<TaskAttemptID> viaHttp = new ArrayList<>();
        try {
            while (!left.isEmpty()) {
                List<TaskAttemptID> batch = new ArrayList<>();
                while (!left.isEmpty() && batch.size() < RegisterProtocol.MAX_MAPS_PER_REQUEST) {
                    batch.add(left.poll());
                }
                if (!readBatch(host, batch, left, viaHttp)) {
                    break;
                }
            }
        } finally {
            for (TaskAttemptID m : left) {
                shuffle.scheduler().putBackKnownMapOutput(host, m);
            }
        }
        if (!viaHttp.isEmpty()) {
            for (TaskAttemptID m : viaHttp) {
                shuffle.scheduler().putBackKnownMapOutput(host, m);
            }
            overHttp(host, viaHttp.size());
        }
    }

    /**
     * READs one batch of {@code host}'s map outputs.
     *
     * @return false when the merge manager had no room or this task's buffers ran out (the rest of the batch is
     *     back in {@code left})
     */
    private boolean readBatch(MapHost host, List<TaskAttemptID> batch, Deque<TaskAttemptID> left,
                              List<TaskAttemptID> viaHttp) throws InterruptedException, IOException {
        NodeAddress service = client.serviceOf(host);
        MapAttempt[] asked = new MapAttempt[batch.size()];
        for (int i = 0; i < asked.length; i++) {
            TaskAttemptID m = batch.get(i);
            asked[i] = new MapAttempt(m.getTaskID().getId(), m.getId());
        }
        RegisterProtocol.Reply reply;
        long asking = System.nanoTime();
        try {
            reply = register(client, host, service, new RegisterProtocol.Request(shuffle.numMaps(),
                    shuffle.numReduces(), shuffle.reduce(), asked, client.registerVersion(host)));
        } catch (IOException | IllegalArgumentException e) {
            shuffle.times().registering(System.nanoTime() - asking);
            // this turn over HTTP, READs later
            if (e instanceof IOException io && client.cannotAsk(host, service, io)) {
                shuffle.reporter().incrCounter(io instanceof org.rdmashuffle.transport.PeerBusyException
                        ? RdmaShuffleCounter.SERVICE_BUSY : RdmaShuffleCounter.SERVICE_UNREACHABLE, 1);
            } else if (e instanceof IllegalArgumentException) {
                client.useHttp(host, "its rdma-shuffle service at " + service + " cannot be asked: " + e.getMessage());
            }
            viaHttp.addAll(batch);
            viaHttp.addAll(left);
            left.clear();
            return false;
        }
        shuffle.times().registering(System.nanoTime() - asking);
        if (reply.status() == RegisterProtocol.UNKNOWN_JOB) { // not answered as the job's service: the wait grows
            shuffle.reporter().incrCounter(RdmaShuffleCounter.SERVICE_UNREACHABLE, 1);
        }
        client.answered(host, reply.status()); // busy or an unknown job: the back-off is not reset
        if (reply.status() != RegisterProtocol.OK) {
            return refused(host, service, reply, batch, left, viaHttp);
        }
        Map<Integer, Pending<K, V>> pending = new HashMap<>();
        List<Request> requests = new ArrayList<>(asked.length);
        boolean room = true;
        int i = 0;
        try {
            for (; i < asked.length; i++) {
                TaskAttemptID mapId = batch.get(i);
                MapState st = reply.maps()[i];
                if (!room || pending.containsKey(asked[i].mapIndex())) {
                    left.addLast(mapId);
                    continue;
                }
                if (st.state() == RegisterProtocol.MISSING) {
                    failed(host, mapId, "its output is not on " + host.getHostName());
                    continue;
                }
                if (st.state() == RegisterProtocol.VIA_HTTP) {
                    viaHttp.add(mapId);
                    continue;
                }
                MapOutput<K, V> out = shuffle.merger().reserve(mapId, st.rawLength(), id);
                if (out == null) {
                    room = false; // the merge manager is merging: the rest waits for the next turn of this host
                    left.addLast(mapId);
                    continue;
                }
                pending.put(asked[i].mapIndex(), new Pending<>(mapId, out, st, System.currentTimeMillis()));
                // LOCATED: one READ of the bytes where the service said; PUBLISHED: slot, metadata, bytes
                requests.add(new Request(service, reply.table(), asked[i].mapIndex(), asked[i].attempt(),
                        shuffle.reduce(), shuffle.reduce() + 1,
                        new Expected(shuffle.numReduces(), st.partLength(), st.partLength()), st.location()));
            }
            fetcher().addAll(requests); // every READ the budget and the pool allow leaves now, the rest as they land
            drain(host, pending, viaHttp);
        } catch (BufferPoolException e) {
            // This task's buffers ran out (not the host's fault): what is not fetched yet goes over HTTP — unless
            // the core calls it this task's own failure (an interrupted wait: the reducer stops; a size no buffer
            // holds), which blames nobody either.
            unprocessed(batch, i, pending, left);
            giveBack(host, pending);
            if (classifier.poolFailed(e) == ReadOutcome.LOCAL_FAILURE) {
                if (stopping(e)) {
                    InterruptedException stop = new InterruptedException("fetcher " + id + " stopped");
                    stop.initCause(e);
                    throw stop;
                }
                throw e;
            }
            client.useHttp(host, "this task's receive buffers ran out: " + e.getMessage());
            closeFetcher();
            room = false; // the rest of this host's maps go back now, and over HTTP
        } catch (InterruptedException | RuntimeException e) {
            unprocessed(batch, i, pending, left);
            giveBack(host, pending);
            throw e;
        }
        return room;
    }

    /**
     * Asks {@code host}'s service ({@code service}) to register {@code r}'s maps, in {@code r}'s version; a service
     * older than that version (it refuses the version) is asked again in version 1 at once, and in version 1 from
     * then on ({@link ReducerClient#registerVersion}).
     */
    static RegisterProtocol.Reply register(ReducerClient client, MapHost host, NodeAddress service,
                                           RegisterProtocol.Request r) throws IOException, InterruptedException {
        RegisterProtocol.Reply reply = RegisterProtocol.parseReply(client.call(service, RegisterProtocol.encode(r)),
                r.maps().length, r.version());
        if (r.version() > RegisterProtocol.VERSION && RegisterProtocol.versionRefused(reply)) {
            client.speaksVersion1(host, service, reply.reason());
            return register(client, host, service, new RegisterProtocol.Request(r.numMaps(), r.numReduces(),
                    r.reduce(), r.maps(), RegisterProtocol.VERSION));
        }
        return reply;
    }

    /**
     * What a REGISTER of {@code batch} that {@code host}'s service did not answer OK means. Busy (every register
     * worker taken): that batch goes over HTTP this turn, the rest of the host's maps are asked for as usual, and
     * the host is not sent to HTTP for good, so its next turn asks again. An unknown job (a service that restarted
     * and does not know the job yet): the host's outputs go over HTTP for a while, then READs are tried again. No
     * room for the job's output table there: this job's outputs on that host go over HTTP from now on. Any
     * other refusal (a request the service calls bad): the host's outputs go over HTTP from now on. Either way this
     * batch and the rest go over HTTP now.
     *
     * @return whether the rest of the host's maps ({@code left}) are still to be asked for
     */
    boolean refused(MapHost host, NodeAddress service, RegisterProtocol.Reply reply, List<TaskAttemptID> batch,
                    Deque<TaskAttemptID> left, List<TaskAttemptID> viaHttp) {
        if (reply.status() == RegisterProtocol.BUSY) {
            viaHttp.addAll(batch);
            return true;
        }
        if (reply.status() == RegisterProtocol.UNKNOWN_JOB) {
            client.later(host, service, ReducerClient.Later.DOWN, "it does not know the job: " + reply.reason());
        } else if (reply.status() == RegisterProtocol.NO_ROOM) { // up and answering: this job does not fit there
            client.useHttp(host, "its rdma-shuffle service at " + service + " has no room for this job: "
                    + reply.reason());
        } else {
            client.useHttp(host, "its rdma-shuffle service at " + service + " refused: " + reply.reason());
        }
        viaHttp.addAll(batch);
        viaHttp.addAll(left);
        left.clear();
        return false;
    }

    /** Takes every pending READ's block (or failure) and hands the bytes to the merge manager. */
    private void drain(MapHost host, Map<Integer, Pending<K, V>> pending, List<TaskAttemptID> viaHttp)
            throws InterruptedException {
        while (!pending.isEmpty()) {
            Block b;
            long waiting = System.nanoTime();
            try {
                b = fetcher().next();
            } catch (FetchFailure e) {
                shuffle.times().waitingForReads(System.nanoTime() - waiting);
                // A READ failed or timed out, or what the peer claims does not hold: a transport fault (connection
                // lost, node withdrawn or restarted, a slow disk), not proof that the map's output is bad. Nothing
                // is blamed: what is not fetched yet goes back, and this host's outputs go to Hadoop's HTTP
                // fetcher, whose retries and fetch-failure reports decide about the maps.
                boolean data = dataFault(classifier.failed(e), e); // never, for what the fetcher itself reports
                Pending<K, V> p = e.request() == null ? null : pending.remove(e.request().mapIndex());
                if (p != null) {
                    p.out().abort();
                    if (data) {
                        failed(host, p.mapId(), e.getMessage());
                    } else {
                        viaHttp.add(p.mapId());
                    }
                }
                // Over HTTP for a while, then READs again: a service that restarted serves them again.
                client.later(host, client.serviceOf(host), ReducerClient.Later.DOWN, "a READ from it failed: "
                        + e.getMessage());
                shuffle.reporter().incrCounter(RdmaShuffleCounter.READ_FAILURES, 1);
                closeFetcher(); // what is still in flight is dropped with the fetcher
                for (Pending<K, V> q : pending.values()) {
                    q.out().abort();
                    viaHttp.add(q.mapId());
                }
                pending.clear();
                continue;
            }
            long merging = System.nanoTime();
            shuffle.times().waitingForReads(merging - waiting);
            try (b) {
                Pending<K, V> p = pending.remove(b.request().mapIndex());
                if (p == null) {
                    continue;
                }
                if (b.unregistered()) {
                    p.out().abort();
                    viaHttp.add(p.mapId());
                    continue;
                }
                try (InputStream in = b.open(0, b.length())) {
                    p.out().shuffle(host, in, p.state().partLength(), p.state().rawLength(), shuffle.metrics(),
                            shuffle.reporter());
                } catch (IOException | RuntimeException | InternalError e) {
                    p.out().abort();
                    Verdict v = whileShuffling(e, b.request());
                    BufferPoolException pool = causeOf(e, BufferPoolException.class);
                    switch (v) {
                        case BAD_DATA -> failed(host, p.mapId(), e.toString());
                        case VIA_HTTP -> {
                            viaHttp.add(p.mapId());
                            if (pool != null) {
                                throw pool; // readBatch sends the rest to HTTP, as for the pool failing in next()
                            }
                            shuffle.reporter().incrCounter(RdmaShuffleCounter.READ_FAILURES, 1);
                            client.useHttp(host, "a READ from it failed: " + e);
                        }
                        case STOP -> {
                            shuffle.scheduler().putBackKnownMapOutput(host, p.mapId());
                            InterruptedException stop = new InterruptedException("fetcher " + id + " stopped");
                            stop.initCause(e);
                            throw stop;
                        }
                        case LOCAL_FAILURE -> {
                            shuffle.scheduler().putBackKnownMapOutput(host, p.mapId());
                            if (pool != null) {
                                throw pool;
                            }
                            throw e instanceof RuntimeException re ? re : new IllegalStateException(e);
                        }
                    }
                    continue;
                } finally {
                    shuffle.times().merging(System.nanoTime() - merging);
                }
                try {
                    shuffle.scheduler().copySucceeded(p.mapId(), host, p.state().partLength(), p.startMillis(),
                            System.currentTimeMillis(), p.out());
                } catch (IOException e) {
                    // committing to the merge manager failed: a local error, not the map's
                    shuffle.reportException(e);
                    continue;
                }
                shuffle.metrics().successFetch();
                shuffle.reporter().incrCounter(RdmaShuffleCounter.MAPS_READ, 1);
                shuffle.reporter().incrCounter(RdmaShuffleCounter.BYTES_READ, p.state().partLength());
            }
        }
    }

    /** What {@link #drain} does about a map output whose bytes could not be handed to the merge manager. */
    enum Verdict {
        /** The map's bytes are bad: {@code copyFailed} and {@code hostFailed}, as Hadoop's fetcher reports them. */
        BAD_DATA,
        /** Nobody is blamed: the map (and its host) go to Hadoop's HTTP fetcher. */
        VIA_HTTP,
        /** The reducer is shutting down (this thread was interrupted): stop, reporting nothing. */
        STOP,
        /** This task's own trouble no other path solves: the task fails, blaming nobody. */
        LOCAL_FAILURE
    }

    /**
     * The verdict on {@code e}, thrown while the merge manager read the block of {@code r} — by the IFile checksum
     * or the codec (the bytes' fault, whatever its type: a decoder of Java code throws what it happens to throw on
     * corrupt input), or by what this task itself does there (not the bytes'): its fetcher's stream (a window that
     * failed, its pool giving no buffer, the fetcher closed or this thread interrupted), or the merge manager's own
     * disk while this thread is interrupted. Those are told by what they throw, also when a decoder wrapped it.
     */
    Verdict whileShuffling(Throwable e, BlockFetcher.Request r) {
        if (stopping(e)) {
            return Verdict.STOP; // the reducer shuts down: nothing read now says anything about the map
        }
        BlockFetcher.StreamFailed window = causeOf(e, BlockFetcher.StreamFailed.class);
        if (window != null) { // a window that failed or timed out: a transport fault unless the core blames bytes
            return dataFault(classifier.failed(window.failure()), window.failure()) ? Verdict.BAD_DATA
                    : Verdict.VIA_HTTP;
        }
        BufferPoolException pool = causeOf(e, BufferPoolException.class);
        if (pool != null) { // this task's buffers, not the host's fault
            return classifier.poolFailed(pool) == ReadOutcome.LOCAL_FAILURE ? Verdict.LOCAL_FAILURE : Verdict.VIA_HTTP;
        }
        if (fetchersOwn(e)) {
            return Verdict.LOCAL_FAILURE;
        }
        FetchFailure corrupt = new FetchFailure(r, FetchFailure.Kind.CORRUPT, e.toString(), e, false);
        return dataFault(classifier.corrupt(corrupt, true), corrupt) ? Verdict.BAD_DATA : Verdict.VIA_HTTP;
    }

    /** Whether this thread is being stopped: {@link #shutDown} ran, or {@code e} says the thread was interrupted. */
    private boolean stopping(Throwable e) {
        return stopped || Thread.currentThread().isInterrupted() || causeOf(e, InterruptedException.class) != null
                || causeOf(e, java.io.InterruptedIOException.class) != null
                || causeOf(e, java.nio.channels.ClosedByInterruptException.class) != null;
    }

    /**
     * Whether {@code e} (or what it wraps) is an {@link IllegalStateException} the core's fetcher threw about its
     * own state (a block or fetcher closed, an interrupted wait) rather than one a decoder threw about the bytes.
     */
    private static boolean fetchersOwn(Throwable e) {
        String fetch = BlockFetcher.class.getPackageName() + ".";
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            StackTraceElement[] at = t.getStackTrace();
            if (t instanceof IllegalStateException && at.length > 0 && at[0].getClassName().startsWith(fetch)) {
                return true;
            }
        }
        return false;
    }

    /** {@code e} or the first of its causes that is a {@code type}, or null (a chain of at most 32). */
    private static <T extends Throwable> T causeOf(Throwable e, Class<T> type) {
        Throwable t = e;
        for (int depth = 0; t != null && depth < 32; depth++, t = t.getCause()) {
            if (type.isInstance(t)) {
                return type.cast(t);
            }
        }
        return null;
    }

    /** Puts the maps of {@code batch} from {@code from} on that are not pending into {@code left}. */
    private static void unprocessed(List<TaskAttemptID> batch, int from, Map<Integer, ? extends Pending<?, ?>> pending,
                                    Deque<TaskAttemptID> left) {
        for (int j = from; j < batch.size(); j++) {
            TaskAttemptID m = batch.get(j);
            Pending<?, ?> p = pending.get(m.getTaskID().getId());
            if (p == null || !p.mapId().equals(m)) {
                left.addLast(m);
            }
        }
    }

    /** Aborts every reserved output not fetched yet and puts its map back for a later turn of the host. */
    private void giveBack(MapHost host, Map<Integer, Pending<K, V>> pending) {
        for (Pending<K, V> p : pending.values()) {
            p.out().abort();
            shuffle.scheduler().putBackKnownMapOutput(host, p.mapId());
        }
        pending.clear();
    }

    /**
     * A fault of the map's data (its output is not there, its bytes fail the checksum or do not decode): reported
     * as Hadoop's fetcher reports it, and the map put back, so it is fetched again after the host's penalty (or
     * rerun by the ApplicationMaster once enough reducers reported it).
     */
    private void failed(MapHost host, TaskAttemptID mapId, String why) {
        LOG.warn("rdma-shuffle: fetching {} from {} failed: {}", mapId, host.getHostName(), why);
        shuffle.reporter().incrCounter(RdmaShuffleCounter.READ_FAILURES, 1);
        shuffle.metrics().failedFetch();
        if (!hostFailedThisTurn) { // as Hadoop's fetcher: the host's failures count too, once per turn of the host
            hostFailedThisTurn = true;
            shuffle.scheduler().hostFailed(host.getHostName());
        }
        shuffle.scheduler().copyFailed(mapId, host, true, false);
        shuffle.scheduler().putBackKnownMapOutput(host, mapId);
    }

    private void overHttp(MapHost host, int maps) throws IOException {
        if (http == null) {
            http = shuffle.newHttpFetcher();
        }
        shuffle.reporter().incrCounter(RdmaShuffleCounter.MAPS_VIA_HTTP, maps);
        http.fetch(host);
    }

    private BlockFetcher fetcher() {
        if (fetcher == null) {
            fetcher = client.newFetcher(shuffle.fetcherThreads());
        }
        return fetcher;
    }

    private void closeFetcher() {
        if (fetcher != null) {
            fetcher.close();
            fetcher = null;
        }
    }
}
