package org.rdmashuffle.transport;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/** Collects READ completions for a test: status per request id, and a latch for the expected count. */
class Completions implements ReadListener {
    final ConcurrentHashMap<Long, Integer> status = new ConcurrentHashMap<>();
    final ConcurrentHashMap<Long, Integer> lengths = new ConcurrentHashMap<>();
    final ConcurrentHashMap<Long, String> threads = new ConcurrentHashMap<>();
    private final CountDownLatch latch;
    volatile int duplicates;

    Completions(int expected) {
        latch = new CountDownLatch(expected);
    }

    @Override
    public void onReadComplete(long requestId, int st, int lengthBytes) {
        if (status.putIfAbsent(requestId, st) != null) {
            duplicates++;
        }
        lengths.put(requestId, lengthBytes);
        threads.put(requestId, Thread.currentThread().getName());
        latch.countDown();
    }

    boolean await(long seconds) throws InterruptedException {
        return latch.await(seconds, TimeUnit.SECONDS);
    }

    int statusOf(long id) {
        Integer s = status.get(id);
        return s == null ? -1 : s;
    }

    long count(int st) {
        return status.values().stream().filter(v -> v == st).count();
    }
}
