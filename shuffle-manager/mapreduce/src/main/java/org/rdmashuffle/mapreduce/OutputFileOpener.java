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
import java.util.concurrent.ExecutionException;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Opens the map output files {@link LocalDirs#openPlainFiles} checked, so that a FIFO a task swaps in between the
 * check and the open cannot hold the caller (a register worker): Java opens blocking, and a FIFO's read end opens
 * only once a writer opens it. The open runs on an opener thread of its own, through a second handle on the same
 * directory (the caller's may be closed meanwhile); the caller waits at most {@code boundMs}. Past that it opens the
 * name for reading and writing itself, no link followed, if it is a FIFO now (which never blocks on Linux and lets
 * the stuck open return), closes what either open gave, and refuses the file. If that cannot be done (the FIFO is
 * not writable by the service), the opener thread stays until a writer comes and closes what it opens then; at most
 * {@value #MAX_THREADS} opener threads exist, past that a file is refused at once.
 */
final class OutputFileOpener implements AutoCloseable {
    /** Opens on the calling thread (tests, and callers that hold nothing other jobs wait for). */
    static final OutputFileOpener DIRECT = new OutputFileOpener(0, name -> { }, "direct");
    /** Opener threads at most (opens under way at once, stuck ones included). */
    static final int MAX_THREADS = 16;
    private static final Set<StandardOpenOption> READ_WRITE = Set.of(StandardOpenOption.READ,
            StandardOpenOption.WRITE);

    /** A test seam: called on the opening thread after a file was checked, before it is opened. */
    interface BeforeOpen {
        void checked(String shown);
    }

    /** A file refused because it did not open within the bound (or no opener thread was free). */
    static final class NotOpenedInTime extends IOException {
        private static final long serialVersionUID = 1L;

        NotOpenedInTime(String message) {
            super(message);
        }
    }

    private volatile long boundMs;
    private final BeforeOpen beforeOpen;
    private final ThreadPoolExecutor threads;
    private final AtomicInteger refused = new AtomicInteger();
    private final AtomicInteger opening = new AtomicInteger();

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
     * @throws IOException when it cannot be opened, or not within the bound (a FIFO, or a disk that slow)
     */
    SeekableByteChannel open(SecureDirectoryStream<Path> dir, Path file, String shown) throws IOException {
        beforeOpen.checked(shown);
        if (threads == null) {
            return dir.newByteChannel(file, LocalDirs.READ_NO_LINK);
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
            unblock(dir, file, refusal);
            opened.whenComplete((c, t) -> closeQuietly(c)); // at once if it returned, else when a writer comes
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
