package org.rdmashuffle.transport.verbs;

/**
 * The READs of one post, as primitive arrays a channel rewrites in place (one instance per channel,
 * sized to its READ window): what a {@link QueuePair} turns into work requests. A READ that is not
 * {@link #signaled} makes no work completion when it succeeds: completions of a queue pair come in post
 * order, so the next signaled READ's completion says it succeeded too (an error completes every READ,
 * signaled or not).
 */
final class ReadChain {
    final long[] wrId;
    final long[] local;
    final int[] lkey;
    final int[] length;
    final long[] remote;
    final int[] rkey;
    final boolean[] signaled;

    ReadChain(int capacity) {
        wrId = new long[capacity];
        local = new long[capacity];
        lkey = new int[capacity];
        length = new int[capacity];
        remote = new long[capacity];
        rkey = new int[capacity];
        signaled = new boolean[capacity];
    }

    int capacity() {
        return wrId.length;
    }
}
