package org.rdmashuffle.transport.verbs;

/**
 * The READs of one post, as primitive arrays a channel rewrites in place (one instance per channel,
 * sized to its READ window): what a {@link QueuePair} turns into work requests.
 */
final class ReadChain {
    final long[] wrId;
    final long[] local;
    final int[] lkey;
    final int[] length;
    final long[] remote;
    final int[] rkey;

    ReadChain(int capacity) {
        wrId = new long[capacity];
        local = new long[capacity];
        lkey = new int[capacity];
        length = new int[capacity];
        remote = new long[capacity];
        rkey = new int[capacity];
    }

    int capacity() {
        return wrId.length;
    }
}
