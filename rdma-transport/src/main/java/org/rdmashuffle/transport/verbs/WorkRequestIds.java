package org.rdmashuffle.transport.verbs;

/**
 * The 64-bit id a channel gives each READ work request, the same whichever API posts it: the tag of
 * the queue pair it was posted on (high 32 bits) and the channel's slot (low 32 bits). A work
 * completion carries the id back, with the number of the queue pair that made it; but a completion of
 * a destroyed queue pair can still be in the completion queue when its number is given to a new queue
 * pair (siw, for one, hands out the lowest free number), and DiSNI and the {@code java.lang.foreign}
 * device both find the queue pair by that number. The tag tells them apart: a node gives every queue
 * pair it posts on a tag of its own ({@link VerbsNode#nextQueuePairTag}, never 0, 2^32 - 1 of them
 * before one comes round again), and a channel counts a completion only when its tag is the one of its
 * current queue pair.
 */
final class WorkRequestIds {
    /** No queue pair has it: a channel between queue pairs counts no completion. */
    static final int NO_TAG = 0;

    private WorkRequestIds() {
    }

    /** The id of the READ in {@code slot} posted on the queue pair tagged {@code tag}. */
    static long of(int tag, int slot) {
        return ((long) tag << 32) | (slot & 0xFFFF_FFFFL);
    }

    static int tag(long wrId) {
        return (int) (wrId >>> 32);
    }

    static int slot(long wrId) {
        return (int) wrId;
    }
}
