package org.rdmashuffle.transport.verbs;

import static org.rdmashuffle.transport.verbs.RdmaCore.getInt;
import static org.rdmashuffle.transport.verbs.RdmaCore.getLong;
import static org.rdmashuffle.transport.verbs.RdmaCore.state;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.concurrent.locks.Lock;
import org.rdmashuffle.transport.TransportException;

/**
 * One memory registration through {@code java.lang.foreign} ({@code ibv_reg_mr}), and its
 * deregistration. A deregistration that failed is not done: the memory may still be registered with the
 * NIC, so the caller keeps it ({@link VerbsRegion}), and a later call tries again.
 */
final class FfmMemory implements VerbsDevice.Memory {
    private final RdmaCore core;
    private final MemorySegment mr;
    private final long address;
    private final int lkey;
    private final int rkey;
    private boolean done;

    private FfmMemory(RdmaCore core, MemorySegment mr) {
        this.core = core;
        this.mr = mr;
        long m = mr.address();
        this.address = getLong(m + RdmaCore.MR_ADDR);
        this.lkey = getInt(m + RdmaCore.MR_LKEY);
        this.rkey = getInt(m + RdmaCore.MR_RKEY);
    }

    /**
     * Registers {@code memory} (position 0 to capacity) with {@code pd}, holding {@code lifecycle} (the
     * device's read lock: a close waits, and frees the protection domain only after).
     *
     * @param closed whether the device is closed (read under the lock)
     */
    static FfmMemory register(RdmaCore core, MemorySegment pd, Lock lifecycle, java.util.function.BooleanSupplier closed,
                              ByteBuffer memory, int access) throws IOException {
        MemorySegment buf = MemorySegment.ofBuffer(memory.duplicate().clear());
        MemorySegment mr;
        lifecycle.lock();
        try {
            if (closed.getAsBoolean()) {
                throw new TransportException("verbs: the device is closed");
            }
            mr = (MemorySegment) core.regMr.invokeExact(state(), pd, buf, (long) memory.capacity(), access);
        } catch (IOException | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new TransportException("verbs: registering " + memory.capacity() + " bytes failed: " + t, t);
        } finally {
            lifecycle.unlock();
        }
        if (mr.equals(MemorySegment.NULL)) {
            throw new TransportException("verbs: registering " + memory.capacity() + " bytes failed: "
                    + core.lastError() + " (check the locked-memory limit, `ulimit -l`, and the device's max_mr_size)");
        }
        return new FfmMemory(core, mr);
    }

    @Override
    public long address() {
        return address;
    }

    @Override
    public int lkey() {
        return lkey;
    }

    @Override
    public int rkey() {
        return rkey;
    }

    @Override
    public synchronized void deregister() throws Exception {
        if (done) {
            return;
        }
        int rc;
        try {
            rc = (int) core.deregMr.invokeExact(mr);
        } catch (Throwable t) {
            throw new IOException("ibv_dereg_mr: " + t, t);
        }
        if (rc != 0) { // still registered: the caller keeps the memory (VerbsRegion)
            throw new IOException("ibv_dereg_mr failed: " + core.describe(rc));
        }
        done = true; // only now: a failed deregistration is not a done one
    }
}
