package org.rdmashuffle.pool;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.rdmashuffle.conf.ByteSizes;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The pool's registered memory: its chunks, the shared free list of each size class, the dedicated
 * registrations of buffers above the largest class, and the bytes all of them cover. Guarded by the
 * pool lock; it knows nothing of the cap, which {@link RegistrationCap} checks before anything is
 * registered here.
 *
 * <p>Each chunk of {@code chunkBytes} serves one size class and is cut into buffers of that size,
 * which stay on that class's free list while not in use; a chunk none of whose buffers is out can be
 * deregistered whole ({@link #deregisterIdle}). A buffer above the largest class is a chunk of its
 * own, deregistered when it is returned. Memory is registered once per chunk, never per buffer, and
 * is not zeroed: every READ writes what is then read.
 */
final class ChunkStore {
    private static final Logger LOG = LoggerFactory.getLogger(BufferPool.class); // the pool's log, as operators know it

    private final BufferPool pool;
    private final Registrar registrar;
    private final SizeClasses sizes;
    private final int chunkBytes;
    private final FreeStack[] free;
    private final List<Chunk> chunks = new ArrayList<>();
    private final Set<Chunk> largeChunks = ConcurrentHashMap.newKeySet();
    private boolean closed;
    private long registeredBytes;
    private long registrations;
    private long deregistrations;

    ChunkStore(BufferPool pool, Registrar registrar, SizeClasses sizes, int chunkBytes) {
        this.pool = pool;
        this.registrar = registrar;
        this.sizes = sizes;
        this.chunkBytes = chunkBytes;
        this.free = new FreeStack[sizes.count()];
        for (int i = 0; i < free.length; i++) {
            free[i] = new FreeStack();
        }
    }

    /** A free buffer of class {@code cls}, now counted as out of its chunk; null when the list is empty. */
    RegisteredBuffer pop(int cls) {
        RegisteredBuffer b = free[cls].pop();
        if (b != null) {
            b.chunk.outstanding++;
        }
        return b;
    }

    /** Takes back a buffer of a size class that was out (in use or in a thread cache). */
    void giveBack(RegisteredBuffer b) {
        b.chunk.outstanding--;
        if (closed) {
            return;
        }
        free[b.sizeClass].push(b);
    }

    /**
     * Takes back the memory of a buffer found dropped without release: a buffer above the largest
     * class is deregistered, a slot of a chunk gets a new buffer object on the free list.
     */
    void takeBackLeaked(LeakTracker t) {
        if (t.sizeClass < 0) {
            deregister(t.chunk);
            return;
        }
        t.chunk.outstanding--;
        if (!closed) {
            free[t.sizeClass].push(new RegisteredBuffer(pool, t.chunk, t.sizeClass, t.chunkOffset, t.capacity));
        }
    }

    /** Registers a chunk for class {@code cls} and puts all its buffers on the free list. */
    void registerChunk(int cls) {
        Chunk c = newChunk(cls, chunkBytes);
        int size = sizes.bytes(cls);
        for (int off = chunkBytes - size; off >= 0; off -= size) {
            free[cls].push(new RegisteredBuffer(pool, c, cls, off, size));
        }
        chunks.add(c);
    }

    /** Registers memory of its own for one buffer of {@code sizeBytes}, above the largest class. */
    RegisteredBuffer registerLarge(int sizeBytes) {
        Chunk c = newChunk(-1, sizeBytes);
        largeChunks.add(c);
        RegisteredBuffer b = new RegisteredBuffer(pool, c, -1, 0, sizeBytes);
        c.outstanding = 1;
        return b;
    }

    /**
     * Deregisters chunks none of whose buffers is out, newest first, until {@code bytes} more fit
     * under {@code cap} or none is left.
     */
    void deregisterIdle(long bytes, long cap) {
        for (int i = chunks.size() - 1; i >= 0 && registeredBytes + bytes > cap; i--) {
            Chunk c = chunks.get(i);
            if (c.outstanding == 0) {
                free[c.sizeClass].removeChunk(c);
                chunks.remove(i);
                deregister(c);
            }
        }
    }

    private Chunk newChunk(int cls, int bytes) {
        ByteBuffer memory;
        try {
            memory = DirectMemory.allocateUnzeroed(bytes); // not zeroed: every READ writes what is then read
        } catch (OutOfMemoryError e) {
            // The error's message, not the error: Spark kills an executor whose task failure has an
            // OutOfMemoryError anywhere in its cause chain, and this one is the pool's to handle.
            throw new BufferPoolException("cannot allocate " + ByteSizes.format(bytes) + " of direct memory ("
                    + e.getMessage() + "; raise -XX:MaxDirectMemorySize)", null, true);
        }
        Registration reg;
        try {
            reg = registrar.register(memory);
        } catch (IOException | RuntimeException e) {
            DirectMemory.free(memory);
            // An IOException is the host's or device's limits (see Registrar): memory unavailable.
            throw new BufferPoolException("cannot register " + ByteSizes.format(bytes) + ": " + e.getMessage(), e,
                    e instanceof IOException);
        }
        registrations++;
        registeredBytes += bytes;
        return new Chunk(memory, reg, cls);
    }

    /** Deregisters {@code c} once; a buffer above the largest class when it is returned. */
    void deregister(Chunk c) {
        if (c.deregistered) {
            return;
        }
        c.deregistered = true;
        if (c.sizeClass < 0) {
            largeChunks.remove(c);
        }
        registeredBytes -= c.memory.capacity();
        deregistrations++;
        try {
            c.registration.close();
        } catch (RuntimeException e) {
            LOG.warn("deregistering a {} chunk failed", ByteSizes.format(c.memory.capacity()), e);
        }
    }

    /**
     * Deregisters every chunk, newest first, then the buffers above the largest class; buffers given
     * back from now on are only counted. Called once.
     */
    void close() {
        closed = true;
        for (int i = chunks.size() - 1; i >= 0; i--) {
            deregister(chunks.get(i));
        }
        chunks.clear();
        for (FreeStack f : free) {
            f.clear();
        }
        for (Chunk c : new ArrayList<>(largeChunks)) {
            deregister(c);
        }
    }

    long registeredBytes() {
        return registeredBytes;
    }

    long registrations() {
        return registrations;
    }

    long deregistrations() {
        return deregistrations;
    }
}
