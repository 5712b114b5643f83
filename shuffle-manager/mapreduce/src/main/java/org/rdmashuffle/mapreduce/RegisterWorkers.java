package org.rdmashuffle.mapreduce;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiFunction;
import org.rdmashuffle.transport.ControlHandler;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The register workers of a NodeManager's service, shared fairly by its jobs: REGISTERs wait in a queue of their
 * job, a worker takes only a job no other worker is serving (a job occupies one worker at most, however many of its
 * REGISTERs wait), one REGISTER at a time, and a job with more waiting goes to the back of the jobs' line
 * (round-robin). So one job's slow disk or flood of REGISTERs holds one worker and its own REGISTERs, never another
 * job's. At most {@code maxWaitingPerJob} REGISTERs of one job wait; and when {@code maxWaiting} wait in all, a
 * REGISTER of a job that has one waiting already is refused, but one of a job with none waiting is still admitted
 * (so jobs at their share never shut another job out; the total stays within {@code maxWaiting} plus one per job
 * the service knows). A refused REGISTER is refused at once ({@link #submit} says why; the service answers it
 * busy). A REGISTER whose reply was given up on while it waited (its future cancelled) is skipped unrun.
 *
 * <p>Threads: {@link #submit} on the node's transport thread (never blocks: it queues or refuses); the work on the
 * workers; {@link #close} on the thread stopping the service.
 */
final class RegisterWorkers implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(RegisterWorkers.class);

    /** A REGISTER waiting for a worker: run there, or refused (the service stops) without running. */
    interface Work extends Runnable {
        void refuse(String reason);

        /** Whether nobody waits for this work any more (its reply cancelled): a worker skips it. */
        default boolean abandoned() {
            return false;
        }
    }

    private final int maxWaiting;
    private final int maxWaitingPerJob;
    /** Runs job turns, oldest first; a job has one turn at most queued or running there. */
    private final ThreadPoolExecutor pool;
    /** Guards everything below. */
    private final Object lock = new Object();
    /** The jobs with a REGISTER waiting or running: their turns. */
    private final Map<Object, Turn> turns = new HashMap<>();
    private int waiting;
    private boolean closed;
    private final AtomicLong busyReplies = new AtomicLong();
    /** REGISTERs skipped unrun because their reply was cancelled while they waited. */
    private final AtomicLong skipped = new AtomicLong();

    RegisterWorkers(int threads, int maxWaiting, int maxWaitingPerJob, String name) {
        this.maxWaiting = maxWaiting;
        this.maxWaitingPerJob = maxWaitingPerJob;
        AtomicInteger n = new AtomicInteger();
        this.pool = new ThreadPoolExecutor(threads, threads, 0, TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(), r -> {
            Thread t = new Thread(r, name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
    }

    /**
     * Queues {@code work} behind its job's ({@code job}: any key with equals) other REGISTERs.
     *
     * @return null when queued, else why it is refused (the service is stopping, too many wait)
     */
    String submit(Object job, Work work) {
        return submit(job, work, true);
    }

    /** {@link #submit(Object, Work)}; without {@code firstAdmitted}, the global limit holds for a job's first too. */
    private String submit(Object job, Work work, boolean firstAdmitted) {
        synchronized (lock) {
            if (closed) {
                return "the service is stopping";
            }
            Turn t = turns.get(job);
            int ofJob = t == null ? 0 : t.waiting.size();
            if (ofJob >= maxWaitingPerJob) {
                return maxWaitingPerJob + " REGISTERs of this job are waiting already";
            }
            if (waiting >= maxWaiting && (ofJob > 0 || !firstAdmitted)) {
                return maxWaiting + " REGISTERs are waiting already";
            }
            if (t == null) {
                t = new Turn(job);
                turns.put(job, t);
            }
            t.waiting.add(work);
            waiting++;
            if (!t.inLine) {
                t.inLine = true;
                pool.execute(t); // an unbounded queue, not shut down before closed is set: never refused
            }
            return null;
        }
    }

    /**
     * The service's control handler: a REGISTER from a connection authenticated for a job ({@code register}
     * answers it) is handed to a worker (on the node's transport thread: only this hand-over), or answered
     * {@link RegisterProtocol#BUSY} at once when too many wait ({@link #submit}); a connection without a job is refused.
     */
    ControlHandler handler(BiFunction<String, ByteBuffer, ByteBuffer> register) {
        return new ControlHandler() {
            @Override
            public ByteBuffer onMessage(ByteBuffer request) {
                return RegisterProtocol.encodeRefusal(RegisterProtocol.BAD_REQUEST, "connections must name their job");
            }

            @Override
            public ByteBuffer onMessage(String realm, ByteBuffer request) {
                return register.apply(realm, request);
            }

            @Override
            public CompletableFuture<ByteBuffer> onMessageAsync(String realm, ByteBuffer request) {
                if (realm == null) {
                    return ControlHandler.super.onMessageAsync(null, request);
                }
                RegisterTask task = new RegisterTask(realm, request, register);
                String full = submit(realm, task);
                if (full != null) {
                    long n = busyReplies.incrementAndGet();
                    if (n == 1 || n % 1000 == 0) { // counted, not logged per refusal
                        LOG.warn("rdma-shuffle: {} REGISTER(s) answered busy so far, the last of job {}: {} (a slow"
                                + " disk?); their reducers fetch those maps over HTTP this time", n, realm, full);
                    }
                    task.refuse(full);
                }
                return task.reply;
            }
        };
    }

    /** One REGISTER for a register worker; its request buffer stays valid until its reply completes. */
    private static final class RegisterTask implements Work {
        final String realm;
        final ByteBuffer request;
        final BiFunction<String, ByteBuffer, ByteBuffer> register;
        final CompletableFuture<ByteBuffer> reply = new CompletableFuture<>();

        RegisterTask(String realm, ByteBuffer request, BiFunction<String, ByteBuffer, ByteBuffer> register) {
            this.realm = realm;
            this.request = request;
            this.register = register;
        }

        @Override
        public void run() {
            try {
                reply.complete(register.apply(realm, request));
            } catch (Throwable t) { // the reducer hears HANDLER_FAILED; the worker goes on
                LOG.warn("rdma-shuffle: a REGISTER of job {} failed: {}", realm, t.toString(), t);
                reply.completeExceptionally(t);
            }
        }

        @Override
        public void refuse(String reason) {
            reply.complete(RegisterProtocol.encodeRefusal(RegisterProtocol.BUSY, reason));
        }

        @Override
        public boolean abandoned() {
            return reply.isCancelled();
        }
    }

    /** REGISTERs answered {@link RegisterProtocol#BUSY} so far. */
    long busyReplies() {
        return busyReplies.get();
    }

    /**
     * The workers as an executor, each task given as a job of its own (tests fill them to see what a REGISTER gets
     * meanwhile); a task past the waiting limit in all is refused with {@link RejectedExecutionException} (a job's
     * first REGISTER is not exempt here).
     */
    Executor asExecutor() {
        return work -> {
            String full = submit(new Object(), new Work() {
                @Override
                public void run() {
                    work.run();
                }

                @Override
                public void refuse(String reason) {
                }
            }, false);
            if (full != null) {
                throw new RejectedExecutionException(full);
            }
        };
    }

    /** REGISTERs skipped unrun so far: their reply was cancelled while they waited (tests). */
    long skipped() {
        return skipped.get();
    }

    /** REGISTERs waiting for a worker now (tests). */
    int waiting() {
        synchronized (lock) {
            return waiting;
        }
    }

    /** One job's REGISTERs and its place in the workers' line. */
    private final class Turn implements Runnable {
        final Object job;
        final ArrayDeque<Work> waiting = new ArrayDeque<>();
        /** Whether this job's turn is queued or running on the pool. */
        boolean inLine;

        Turn(Object job) {
            this.job = job;
        }

        @Override
        public void run() {
            Work w;
            synchronized (lock) {
                w = waiting.poll();
                if (w != null) {
                    RegisterWorkers.this.waiting--;
                }
            }
            try {
                if (w != null && w.abandoned()) {
                    skipped.incrementAndGet(); // its reducer gave up on it: no disk work for nobody
                } else if (w != null) {
                    w.run();
                }
            } catch (Throwable t) { // the work answers its own failures; this keeps the worker going
                LOG.warn("rdma-shuffle: a REGISTER failed on its worker: {}", t.toString(), t);
            } finally {
                synchronized (lock) {
                    if (waiting.isEmpty() || closed) {
                        inLine = false;
                        if (waiting.isEmpty()) {
                            turns.remove(job);
                        }
                    } else {
                        pool.execute(this); // behind the jobs that wait already: round-robin
                    }
                }
            }
        }
    }

    /**
     * Stops taking REGISTERs, refuses those still waiting ({@link Work#refuse}), and waits for the running ones at
     * most {@code waitMs}; the workers' threads are stopped after.
     *
     * @return whether the running ones finished in time
     */
    boolean close(long waitMs) throws InterruptedException {
        List<Work> refused = new ArrayList<>();
        synchronized (lock) {
            closed = true;
            for (Turn t : turns.values()) {
                refused.addAll(t.waiting);
                waiting -= t.waiting.size();
                t.waiting.clear();
            }
            pool.shutdown();
        }
        for (Work w : refused) {
            w.refuse("the service is stopping");
        }
        return pool.awaitTermination(waitMs, TimeUnit.MILLISECONDS);
    }

    /** Stops the workers' threads now (after {@link #close(long)}, or when the service could not start). */
    @Override
    public void close() {
        synchronized (lock) {
            closed = true;
        }
        pool.shutdownNow();
    }
}
