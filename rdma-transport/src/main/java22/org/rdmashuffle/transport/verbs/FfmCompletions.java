package org.rdmashuffle.transport.verbs;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static java.lang.foreign.ValueLayout.JAVA_SHORT;
import static org.rdmashuffle.transport.verbs.RdmaCore.state;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The completion thread of a {@code java.lang.foreign} device: polls the node's one completion queue into a
 * work-completion array allocated once and hands each completion straight to its channel, with no thread
 * hand-off, no boxing and no allocation; sleeps on the completion channel when the queue is empty.
 * Before an error completion reaches its channel, the device's ports are checked ({@link LocalPorts}).
 */
final class FfmCompletions {
    private static final Logger LOG = LoggerFactory.getLogger(FfmCompletions.class);
    /** Work completions taken per ibv_poll_cq call. */
    private static final int WC_BATCH = 32;
    /** Completion events acknowledged together (ibv_ack_cq_events takes a mutex). */
    private static final int ACK_BATCH = 32;

    private final FfmDevice device;
    private final RdmaCore core;
    private final FfmQueuePairs queuePairs;
    private final LocalPorts ports;
    private final MemorySegment cq;
    private final MemorySegment compChannel;
    private final int compFd;
    private final MemorySegment pollCqFn;
    private final MemorySegment reqNotifyFn;
    private final int eventTimeoutMs;
    /** Callbacks waiting for the queue to be polled past what it holds now; the thread's, but for adding. */
    private final ConcurrentLinkedQueue<Runnable> barriers = new ConcurrentLinkedQueue<>();
    // The thread's native memory, allocated once: work completions, a pollfd, ibv_get_cq_event's results.
    private final MemorySegment wcs;
    private final MemorySegment pfd;
    private final MemorySegment cqOut;
    private final MemorySegment ctxOut;
    private final Thread thread;

    /** Its native memory comes from {@code arena} (the device's, closed once this thread has stopped). */
    FfmCompletions(FfmDevice device, Arena arena, FfmQueuePairs queuePairs, LocalPorts ports, MemorySegment cq,
                   MemorySegment compChannel, int compFd, MemorySegment pollCqFn, MemorySegment reqNotifyFn,
                   int eventTimeoutMs) {
        this.device = device;
        this.core = device.core;
        this.queuePairs = queuePairs;
        this.ports = ports;
        this.cq = cq;
        this.compChannel = compChannel;
        this.compFd = compFd;
        this.pollCqFn = pollCqFn;
        this.reqNotifyFn = reqNotifyFn;
        this.eventTimeoutMs = eventTimeoutMs;
        this.wcs = arena.allocate(RdmaCore.WC_SIZE * WC_BATCH, 8);
        this.pfd = arena.allocate(8, 8);
        this.cqOut = arena.allocate(ADDRESS);
        this.ctxOut = arena.allocate(ADDRESS);
        this.thread = new Thread(this::loop, "rdma-verbs-cq-" + device.port());
        thread.setDaemon(true);
    }

    Thread thread() {
        return thread;
    }

    void start() {
        thread.start();
    }

    private void loop() {
        int unacked = 0;
        ArrayList<Runnable> due = new ArrayList<>();
        try {
            while (!device.closed()) {
                if (!barriers.isEmpty()) { // failures only: the READ path finds the queue empty
                    for (Runnable r; (r = barriers.poll()) != null;) {
                        due.add(r);
                    }
                }
                int n = (int) core.pollCq.invokeExact(pollCqFn, cq, WC_BATCH, wcs);
                if (n < 0) {
                    device.node.deviceFailed("ibv_poll_cq failed (" + n + ")");
                    return;
                }
                if (n > 0) {
                    dispatch(wcs, n);
                }
                if (n < WC_BATCH && !due.isEmpty()) {
                    runBarriers(due); // polled past everything queued before they were added
                }
                if (n == WC_BATCH) {
                    continue;
                }
                if (device.closed()) {
                    break;
                }
                int rc = (int) core.reqNotifyCq.invokeExact(reqNotifyFn, cq, 0);
                if (rc != 0) {
                    device.node.deviceFailed("ibv_req_notify_cq failed: " + core.describe(rc));
                    return;
                }
                n = (int) core.pollCq.invokeExact(pollCqFn, cq, WC_BATCH, wcs); // those that came before arming
                if (n > 0) {
                    dispatch(wcs, n);
                    continue;
                }
                pfd.set(JAVA_INT, 0, compFd);
                pfd.set(JAVA_SHORT, 4, RdmaCore.POLLIN);
                pfd.set(JAVA_SHORT, 6, (short) 0);
                int r = (int) core.poll.invokeExact(state(), pfd, 1L, eventTimeoutMs);
                if (r > 0 && (int) core.getCqEvent.invokeExact(state(), compChannel, cqOut, ctxOut) == 0) {
                    if (++unacked >= ACK_BATCH) {
                        core.ackCqEvents.invokeExact(cq, unacked);
                        unacked = 0;
                    }
                }
            }
        } catch (Throwable t) {
            LOG.error("verbs: the completion thread failed", t);
            device.node.deviceFailed("the completion thread failed: " + t);
        } finally {
            for (Runnable r; (r = barriers.poll()) != null;) {
                due.add(r);
            }
            runBarriers(due); // nothing polls any more
            if (unacked > 0) {
                int u = unacked;
                FfmDevice.call(() -> {
                    core.ackCqEvents.invokeExact(cq, u);
                });
            }
        }
    }

    private static void runBarriers(ArrayList<Runnable> due) {
        for (Runnable r : due) {
            try {
                r.run();
            } catch (RuntimeException e) {
                LOG.error("verbs: a completion-queue barrier failed", e);
            }
        }
        due.clear();
    }

    /** See {@link VerbsDevice#afterCompletionsPolled}. */
    void afterCompletionsPolled(Runnable r) {
        if (device.closed()) {
            r.run(); // no thread polls any more
            return;
        }
        barriers.add(r);
        if (device.closed() && barriers.remove(r)) {
            r.run();
        }
    }

    private void dispatch(MemorySegment wcs, int n) {
        for (int i = 0; i < n; i++) {
            long base = i * RdmaCore.WC_SIZE;
            long wrId = wcs.get(JAVA_LONG, base + RdmaCore.WC_WR_ID);
            int status = wcs.get(JAVA_INT, base + RdmaCore.WC_STATUS);
            int qpNum = wcs.get(JAVA_INT, base + RdmaCore.WC_QP_NUM);
            if (status != WcStatus.SUCCESS) {
                ports.check(); // a local link failure is recorded as the node's before the channel hears of it
            }
            FfmQueuePair qp = queuePairs.byQpNum(qpNum);
            // A destroyed queue pair's completion may still be queued when its number is reused: the channel
            // tells them apart by the queue pair's tag in the id (WorkRequestIds).
            VerbsChannel c = qp == null ? null : qp.channel();
            if (c != null) {
                try {
                    c.onCompletion(qp, wrId, status);
                } catch (RuntimeException e) {
                    LOG.error("verbs: handling a completion failed", e);
                }
            }
        }
    }
}
