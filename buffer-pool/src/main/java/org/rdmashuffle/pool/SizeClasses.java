package org.rdmashuffle.pool;

/**
 * The pool's size classes: the powers of two from the smallest buffer to the largest. A request is
 * rounded up to its class; a request above the largest class is not in any class and takes exactly
 * what it asked for. Immutable.
 */
final class SizeClasses {
    private final int minShift;
    private final int count;
    private final int maxBufferBytes;

    SizeClasses(int minBufferBytes, int maxBufferBytes) {
        this.minShift = Integer.numberOfTrailingZeros(minBufferBytes);
        this.count = Integer.numberOfTrailingZeros(maxBufferBytes) - minShift + 1;
        this.maxBufferBytes = maxBufferBytes;
    }

    /** How many classes there are; class indexes run from 0 to {@code count() - 1}. */
    int count() {
        return count;
    }

    /** Whether {@code sizeBytes} is above the largest class (and so gets a registration of its own). */
    boolean aboveLargest(int sizeBytes) {
        return sizeBytes > maxBufferBytes;
    }

    /** Class index for a request of {@code sizeBytes} ({@code 0 < sizeBytes <= maxBufferBytes}). */
    int of(int sizeBytes) {
        int shift = 32 - Integer.numberOfLeadingZeros(sizeBytes - 1);
        return Math.max(0, shift - minShift);
    }

    /** The size of the buffers of class {@code cls}. */
    int bytes(int cls) {
        return 1 << (cls + minShift);
    }

    /** See {@link BufferPool#bytesTaken}. */
    int bytesTaken(int sizeBytes) {
        checkPositive(sizeBytes);
        return aboveLargest(sizeBytes) ? sizeBytes : bytes(of(sizeBytes));
    }

    static void checkPositive(int sizeBytes) {
        if (sizeBytes <= 0) {
            throw new IllegalArgumentException("buffer size must be positive: " + sizeBytes);
        }
    }
}
