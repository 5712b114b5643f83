package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A verbs device emulated in the JVM, for tests of what the node and the channel do above the device
 * on a machine without RDMA: a READ copies bytes between buffers registered with two emulated devices
 * (found by key, bounds and access checked as a NIC would), on the requesting device's completion
 * thread, in post order. It keeps the RC rules the channel relies on: a READ posted unsignaled makes no
 * completion when it succeeds; a failed READ makes an error completion, signaled or not, and puts the
 * queue pair in the error state, where every later READ completes flushed; a destroyed queue pair
 * completes nothing more. It counts what was posted, for tests to see how READs were chained and
 * signaled.
 */
final class EmulatedVerbs implements VerbsDeviceFactory {
    private static final AtomicInteger PORTS = new AtomicInteger(20_000);
    private static final Map<Integer, Device> LISTENING = new ConcurrentHashMap<>();
    private static final int WC_LOC_PROT_ERR = 4;
    private static final int WC_REM_ACCESS_ERR = 10;

    final AtomicLong posted = new AtomicLong();
    final AtomicLong signaled = new AtomicLong();
    final AtomicLong completions = new AtomicLong();
    /** The number of READs of each post, in post order. */
    final List<Integer> chains = java.util.Collections.synchronizedList(new ArrayList<>());
    /** When set (a post's number, counted from 0 over every queue pair): that post fails at {@link #failAt}. */
    volatile int failPost = -1;
    /** How many READs of the failing post the queue pair takes before post_send reports the error. */
    volatile int failAt;

    VerbsApis.Choice choice() {
        return new VerbsApis.Choice(this, "emulated in the JVM for tests");
    }

    @Override
    public Optional<String> missing() {
        return Optional.empty();
    }

    @Override
    public String api() {
        return "emulated verbs";
    }

    @Override
    public VerbsDevice open(VerbsNode node, InetSocketAddress bind, QueuePairParameters queuePairs, int credits,
                            int completionQueueSize, int eventTimeoutMs) {
        return new Device(bind.getAddress());
    }

    final class Device implements VerbsDevice {
        private final InetAddress address;
        private final int port = PORTS.incrementAndGet();
        private final Map<Integer, Mem> byKey = new ConcurrentHashMap<>();
        private final ExecutorService cq;
        private final AtomicInteger keys = new AtomicInteger(0x1000);
        private long nextAddress = 0x10_0000_0000L;

        Device(InetAddress address) {
            this.address = address;
            this.cq = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "emulated-verbs-cq-" + port);
                t.setDaemon(true);
                return t;
            });
            LISTENING.put(port, this);
        }

        @Override
        public String name() {
            return "emu0";
        }

        @Override
        public String api() {
            return "emulated verbs";
        }

        @Override
        public String depths() {
            return "emulated";
        }

        @Override
        public InetAddress address() {
            return address;
        }

        @Override
        public int port() {
            return port;
        }

        @Override
        public synchronized Memory register(ByteBuffer memory, int access) {
            long a = nextAddress;
            nextAddress += memory.capacity() + 4096L;
            Mem m = new Mem(this, memory, a, keys.incrementAndGet(), access);
            byKey.put(m.key, m);
            return m;
        }

        @Override
        public QueuePair connect(InetSocketAddress target, long timeoutMs) throws IOException {
            Device peer = LISTENING.get(target.getPort());
            if (peer == null) {
                throw new IOException("emulated verbs: nothing listens on " + target);
            }
            return new Qp(this, peer);
        }

        @Override
        public void closeListener() {
            LISTENING.remove(port, this);
        }

        @Override
        public void close() {
            LISTENING.remove(port, this);
            cq.shutdownNow();
            try {
                cq.awaitTermination(5, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static final class Mem implements VerbsDevice.Memory {
        final Device device;
        final ByteBuffer buf;
        final long address;
        final int key;
        final int access;

        Mem(Device device, ByteBuffer buf, long address, int key, int access) {
            this.device = device;
            this.buf = buf;
            this.address = address;
            this.key = key;
            this.access = access;
        }

        @Override
        public long address() {
            return address;
        }

        @Override
        public int lkey() {
            return key;
        }

        @Override
        public int rkey() {
            return key;
        }

        @Override
        public void deregister() {
            device.byKey.remove(key, this);
        }

        /** Whether [addr, addr + len) lies in this registration. */
        boolean covers(long addr, int len) {
            return addr >= address && addr + len <= address + buf.capacity();
        }
    }

    private final class Qp implements QueuePair {
        private final Device device;
        private final Device peer;
        private volatile VerbsChannel channel;
        private volatile boolean destroyed;
        /** The error state; the completion thread's only. */
        private boolean error;

        Qp(Device device, Device peer) {
            this.device = device;
            this.peer = peer;
        }

        @Override
        public VerbsChannel channel() {
            return channel;
        }

        @Override
        public void channel(VerbsChannel c) {
            channel = c;
        }

        @Override
        public synchronized void post(ReadChain chain, int k) throws IOException {
            if (destroyed) {
                throw new IOException("emulated queue pair destroyed");
            }
            int number;
            synchronized (chains) {
                number = chains.size();
                chains.add(k);
            }
            int take = number == failPost ? Math.min(failAt, k) : k;
            for (int j = 0; j < take; j++) {
                long wrId = chain.wrId[j];
                long local = chain.local[j];
                int lkey = chain.lkey[j];
                int length = chain.length[j];
                long remote = chain.remote[j];
                int rkey = chain.rkey[j];
                boolean sig = chain.signaled[j];
                posted.incrementAndGet();
                if (sig) {
                    signaled.incrementAndGet();
                }
                device.cq.execute(() -> execute(wrId, local, lkey, length, remote, rkey, sig));
            }
            if (take < k) {
                throw new IOException("emulated post_send failure at work request " + take + " of " + k);
            }
        }

        private void execute(long wrId, long local, int lkey, int length, long remote, int rkey, boolean sig) {
            if (destroyed) {
                return;
            }
            int status;
            if (error) {
                status = WcStatus.WR_FLUSH_ERR;
            } else {
                Mem src = peer.byKey.get(rkey);
                Mem dst = device.byKey.get(lkey);
                if (src == null || (src.access & VerbsDevice.ACCESS_REMOTE_READ) == 0 || !src.covers(remote, length)) {
                    status = WC_REM_ACCESS_ERR;
                } else if (dst == null || !dst.covers(local, length)) {
                    status = WC_LOC_PROT_ERR;
                } else {
                    ByteBuffer from = src.buf.duplicate();
                    from.limit((int) (remote - src.address) + length).position((int) (remote - src.address));
                    ByteBuffer to = dst.buf.duplicate();
                    to.position((int) (local - dst.address));
                    to.put(from);
                    status = WcStatus.SUCCESS;
                }
                error = status != WcStatus.SUCCESS;
            }
            VerbsChannel c = channel;
            if ((sig || status != WcStatus.SUCCESS) && c != null) {
                completions.incrementAndGet();
                c.onCompletion(this, wrId, status);
            }
        }

        @Override
        public void closeQuietly() {
            destroyed = true;
        }
    }
}
