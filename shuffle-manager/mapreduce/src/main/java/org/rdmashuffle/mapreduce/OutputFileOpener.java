package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.channels.SeekableByteChannel;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.SecureDirectoryStream;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributeView;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Opens the map output files {@link LocalDirs#openPlainFiles} checked, so that a FIFO a task swaps in between the
 * check and the open cannot hold the caller (a register worker): Java opens blocking, and a FIFO's read end opens
 * only once a writer opens it. The open runs on an opener thread of its own, through a second handle on the same
 * directory (the caller's may be closed meanwhile); the caller waits at most {@code boundMs}. Past that it opens the
 * name for reading and writing itself, no link followed, if it is a FIFO now (which never blocks on Linux and lets
 * the stuck open return), closes what either open gave, and refuses the file. If that cannot be done (the FIFO is
 * not writable by the service, or was unlinked meanwhile), the opener thread stays until a writer comes, which may
 * be never (until the NodeManager restarts), and closes what it opens then. A job has at most
 * {@value #MAX_STUCK_PER_JOB} opens stuck so; past that its files are refused at once (over HTTP: one WARN per job)
 * until one returns, and other jobs' files open on. At most {@value #MAX_THREADS} opener threads exist for all jobs
 * together, past that a file is refused at once.
 */
final class OutputFileOpener implements AutoCloseable {
    /** Opens on the calling thread (tests, and callers that hold nothing other jobs wait for). */
    static final OutputFileOpener DIRECT = new OutputFileOpener(0, name -> { }, "direct");
    /** Opener threads at most (opens under way at once, stuck ones included). */
    static final int MAX_THREADS = 16;
    /** Opens of one job stuck past the bound at most; past that the job's files are refused at once. */
    static final int MAX_STUCK_PER_JOB = 2;
    private static final Logger LOG = LoggerFactory.getLogger(OutputFileOpener.class);
    private static final Set<StandardOpenOption> READ_WRITE = Set.of(StandardOpenOption.READ,
            StandardOpenOption.WRITE);

    /** A test seam: called on the opening thread after a file was checked, before it is opened. */
    interface BeforeOpen {
        void checked(String shown);
    }

    /** A file refused because it did not open within the bound (or no opener thread was free). */
    static final class NotOpenedInTime extends IOException {
        private static final long serialVersionUID = 1L;
        private final boolean warned;

        NotOpenedInTime(String message) {
            this(message, false);
        }

        NotOpenedInTime(String message, boolean warned) {
            super(message);
            this.warned = warned;
        }

        /** Whether the refusal was WARNed already (once per job, for a job past its stuck opens). */
        boolean warned() {
            return warned;
        }
    }

    private volatile long boundMs;
    private final BeforeOpen beforeOpen;
    private final ThreadPoolExecutor threads;
    private final AtomicInteger refused = new AtomicInteger();
    private final AtomicInteger opening = new AtomicInteger();
    /** Each job's opens stuck past the bound (a job is here only while it has one). */
    private final ConcurrentHashMap<String, AtomicInteger> stuck = new ConcurrentHashMap<>();
    /** Jobs WARNed for being past their stuck opens (forgotten when they have none). */
    private final Set<String> warnedJobs = ConcurrentHashMap.newKeySet();
    /** Tests: whether a FIFO's write end is opened to release a stuck open (else it waits for a writer). */
    private volatile boolean unblocks = true;

    /**
     * @param boundMs how long a caller waits for one open (0: opens on the caller, unbounded)
     * @param name    the opener threads' name
     */
    OutputFileOpener(long boundMs, BeforeOpen beforeOpen, String name) {
        this.boundMs = boundMs;
        this.beforeOpen = beforeOpen;
        if (boundMs <= 0) {
            this.threads = null;
            return;
        }
        AtomicInteger n = new AtomicInteger();
        this.threads = new ThreadPoolExecutor(0, MAX_THREADS, 30, TimeUnit.SECONDS, new SynchronousQueue<>(), r -> {
            Thread t = new Thread(r, "rdma-shuffle-open-" + name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
    }

    /** Files refused because their open did not return within the bound, or no opener thread was free. */
    int refused() {
        return refused.get();
    }

    /** Opens under way now on opener threads (those stuck on a FIFO included). */
    int opening() {
        return opening.get();
    }

    /** {@code job}'s opens stuck past the bound now. */
    int stuck(String job) {
        AtomicInteger n = stuck.get(job);
        return n == null ? 0 : n.get();
    }

    /** Tests: whether stuck opens of FIFOs are released by opening their write end (as the service may not). */
    void unblocks(boolean on) {
        this.unblocks = on;
    }

    /** Tests: how long a caller waits for one open from now on (with opener threads only). */
    void boundMs(long ms) {
        if (threads == null || ms <= 0) {
            throw new IllegalArgumentException("no bound of " + ms + " ms on this opener");
        }
        this.boundMs = ms;
    }

    /**
     * Opens {@code file} in {@code dir} for reading, no link followed, within the bound.
     *
     * @param job the job whose file it is ({@code null}: none), its stuck opens capped
     * @throws IOException when it cannot be opened, or not within the bound (a FIFO, or a disk that slow), or
     *         {@code job} has {@value #MAX_STUCK_PER_JOB} opens stuck
     */
    SeekableByteChannel open(SecureDirectoryStream<Path> dir, Path file, String shown, String job) throws IOException {
        beforeOpen.checked(shown);
        if (threads == null) {
            return dir.newByteChannel(file, LocalDirs.READ_NO_LINK);
        }
        if (job != null && stuck(job) >= MAX_STUCK_PER_JOB) {
            refused.incrementAndGet();
            String why = MAX_STUCK_PER_JOB + " opens of job " + job + "'s map outputs are stuck (on FIFOs?)";
            boolean first = warnedJobs.add(job);
            if (first) {
                LOG.warn("rdma-shuffle: {}: its outputs go over HTTP until one returns", why);
            }
            throw new NotOpenedInTime(shown + " is not opened: " + why, true);
        }
        // The opener thread's own handle on the directory: closing the caller's would wait for a stuck open.
        SecureDirectoryStream<Path> own = dir.newDirectoryStream(Paths.get("."), LinkOption.NOFOLLOW_LINKS);
        CompletableFuture<SeekableByteChannel> opened = new CompletableFuture<>();
        try {
            threads.execute(() -> {
                opening.incrementAndGet();
                try (own) {
                    opened.complete(own.newByteChannel(file, LocalDirs.READ_NO_LINK));
                } catch (Throwable t) {
                    opened.completeExceptionally(t);
                } finally {
                    opening.decrementAndGet();
                }
            });
        } catch (RejectedExecutionException e) {
            own.close();
            refused.incrementAndGet();
            if (threads.isShutdown()) {
                throw new NotOpenedInTime(shown + " is not opened: the service is stopping");
            }
            throw new NotOpenedInTime(shown + " is not opened: " + MAX_THREADS + " opens of map outputs are under way"
                    + " (stuck on FIFOs?)");
        }
        long bound = boundMs;
        try {
            return opened.get(bound, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            refused.incrementAndGet();
            IOException refusal = new NotOpenedInTime(shown + " did not open within " + bound + " ms (a FIFO, or a"
                    + " disk that slow)");
            if (unblocks) {
                unblock(dir, file, refusal);
            }
            if (job != null) {
                stuck.computeIfAbsent(job, j -> new AtomicInteger()).incrementAndGet();
            }
            opened.whenComplete((c, t) -> { // at once if it returned, else when a writer comes (maybe never)
                closeQuietly(c);
                if (job != null) {
                    returned(job);
                }
            });
            throw refusal;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            opened.whenComplete((c, t) -> closeQuietly(c));
            throw new InterruptedIOException("interrupted while opening " + shown);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof IOException io) {
                throw io;
            }
            if (cause instanceof RuntimeException r) {
                throw r;
            }
            throw new IOException("opening " + shown + " failed", cause);
        }
    }

    /** Opens {@code file}'s write end (no link followed) if it is a FIFO, so a read end stuck opening it returns. */
    private void unblock(SecureDirectoryStream<Path> dir, Path file, IOException refusal) {
        try {
            BasicFileAttributeView view = dir.getFileAttributeView(file, BasicFileAttributeView.class,
                    LinkOption.NOFOLLOW_LINKS);
            if (!view.readAttributes().isOther()) {
                return; // not a FIFO (now): a slow disk, or swapped again; the open returns by itself
            }
            Set<java.nio.file.OpenOption> options = new java.util.HashSet<>(READ_WRITE);
            options.add(LinkOption.NOFOLLOW_LINKS);
            dir.newByteChannel(file, options).close(); // O_RDWR: never blocks on a FIFO
        } catch (IOException | RuntimeException e) {
            refusal.addSuppressed(e); // not writable by the service: the opener thread waits for a writer
        }
    }

    /** One of {@code job}'s stuck opens returned: the job is forgotten when it has none. */
    private void returned(String job) {
        stuck.computeIfPresent(job, (j, n) -> n.decrementAndGet() > 0 ? n : null);
        if (!stuck.containsKey(job)) {
            warnedJobs.remove(job);
        }
    }

    private static void closeQuietly(SeekableByteChannel c) {
        if (c != null) {
            try {
                c.close();
            } catch (IOException ignored) {
                // nothing was read from it
            }
        }
    }

    /** Stops the opener threads that are idle; one stuck on a FIFO ends when its open returns (daemon). */
    @Override
    public void close() {
        if (threads != null) {
            threads.shutdown();
        }
    }
}
