package org.rdmashuffle.shuffle.core.serve;

import java.util.function.LongSupplier;

/**
 * The executor's cap on registered map output bytes ({@code maxRegisteredOutputBytes}), for map tasks that
 * commit at once: a task reserves its output's bytes before registering (mapping and pinning, which can
 * take long) and gives the reservation back after, so the check and the registration are one step for
 * the cap without holding any lock while a file is mapped and registered.
 *
 * <p>Thread-safe.
 */
public final class RegistrationCap {
    private final long capBytes;
    private final LongSupplier registeredBytes;
    private long reservedBytes;

    /**
     * @param capBytes the cap; 0 for none
     * @param registeredBytes the output bytes registered now (reservations already registered may be
     *     counted twice for a moment, which errs on the side of the cap)
     */
    public RegistrationCap(long capBytes, LongSupplier registeredBytes) {
        this.capBytes = capBytes;
        this.registeredBytes = registeredBytes;
    }

    /**
     * Reserves {@code bytes} if they fit under the cap with what is registered and reserved now.
     *
     * @return whether they were reserved; always true without a cap
     */
    public synchronized boolean reserve(long bytes) {
        if (capBytes == 0) {
            return true;
        }
        if (bytes > 0 && registeredBytes.getAsLong() + reservedBytes + bytes > capBytes) {
            return false;
        }
        reservedBytes += bytes;
        return true;
    }

    /** Gives back a reservation once its registration succeeded (it counts as registered) or failed. */
    public synchronized void release(long bytes) {
        if (capBytes != 0) {
            reservedBytes -= bytes;
        }
    }

    public synchronized long reservedBytes() {
        return reservedBytes;
    }

    public long capBytes() {
        return capBytes;
    }
}
