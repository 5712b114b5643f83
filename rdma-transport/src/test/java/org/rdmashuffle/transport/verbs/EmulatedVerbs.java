package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A verbs device emulated in the JVM, for tests of what the node and the channel do above the device on
 * a machine without RDMA. One instance stands for one host adapter shared by the devices (nodes) opened
 * through it, and keeps the rules of RC queue pairs and of the devices the provider meets:
 *
 * <ul>
 *   <li>A READ copies bytes between buffers registered with two emulated devices (found by key, bounds
 *       and access checked as a NIC would) on the requester's "wire" thread, in post order per queue
 *       pair, {@link #landingDelayMs} after it was posted (or after the READ before it landed). Its work
 *       completion goes into the device's completion queue after its bytes landed: a READ posted
 *       unsignaled makes none when it succeeds; a failed READ makes one, signaled or not, and puts the
 *       queue pair in the error state, where every later READ completes flushed.</li>
 *   <li>One bounded completion queue per device, polled by one thread that hands each completion to the
 *       queue pair that has its number now, as DiSNI does (no tag of its own: a completion a destroyed
 *       queue pair left in the queue reaches the queue pair that reuses its number). Queue pair numbers
 *       are the lowest free ones of the adapter (as siw hands them out). A completion generated while
 *       the queue holds {@code completionQueueSize} is dropped and counted in {@link #overruns}, as siw
 *       drops it; the deepest the queue got is in {@link #deepest}.</li>
 *   <li>Destroying a queue pair ({@link QueuePair#closeQuietly}) reaches the device {@link #destroyDelayMs}
 *       after it begins (READs keep landing meanwhile), waits for a READ being copied, flushes the READs
 *       still pending into the completion queue (as siw does), frees its number and tells the peer's
 *       accepted queue pair, whose node sees a disconnect. A second caller waits for the first one's
 *       destroy when {@link #closeWaits} (as the provider's queue pairs do), else returns at once.</li>
 *   <li>A connect request carries rdma_cm private data to the listener's node, which admits or refuses
 *       it ({@link VerbsNode#admitQueuePair}) before any queue pair exists.</li>
 *   <li>Protection domains: every registration and every accepted queue pair is in one (the device's
 *       default one, or a realm's from {@link Device#openDomain}, chosen for an accepted queue pair by its
 *       admission). A READ whose rkey is registered in another domain than the accepted queue pair it goes
 *       through completes with a remote access error and copies nothing, as on RC; a domain cannot be
 *       deallocated while a registration or queue pair is in it (EBUSY).</li>
 * </ul>
 *
 * <p>Tests can also flap the port ({@link Device#flap}: every queue pair of a device fails at once),
 * report a disconnect while READs are still landing ({@link Device#reportDisconnected}), pause or slow
 * the completion thread, run something just before a connect request goes out
 * ({@link #beforeConnect}), make deregistrations fail ({@link #deregisterFails}), and hand completions and
 * disconnects through the DiSNI path's handler with fake port states ({@link #disniPorts}).
 */
final class EmulatedVerbs implements VerbsDeviceFactory {
    private static final AtomicInteger PORTS = new AtomicInteger(20_000);
    private static final Map<Integer, Device> LISTENING = new ConcurrentHashMap<>();
    private static final int WC_LOC_PROT_ERR = 4;
    private static final int WC_REM_ACCESS_ERR = 10;

    final AtomicLong posted = new AtomicLong();
    final AtomicLong signaled = new AtomicLong();
    /** Work completions generated for client queue pairs (successes, errors and flushes). */
    final AtomicLong completions = new AtomicLong();
    /** Completions dropped because the completion queue was full. */
    final AtomicLong overruns = new AtomicLong();
    /** READs that completed with a remote access error (an rkey unknown, out of bounds, or of another domain). */
    final AtomicLong remoteAccessErrors = new AtomicLong();
    /** The most completions any completion queue held at once. */
    final AtomicInteger deepest = new AtomicInteger();
    /** The number of READs of each post, in post order. */
    final List<Integer> chains = java.util.Collections.synchronizedList(new ArrayList<>());
    /** When set (a post's number, counted from 0 over every queue pair): that post fails at {@link #failAt}. */
    volatile int failPost = -1;
    /** How many READs of the failing post the queue pair takes before post_send reports the error. */
    volatile int failAt;
    /** How long after it is posted (or after the READ before it landed) a READ's bytes land. */
    volatile long landingDelayMs;
    /** How long a destroy takes to reach the device; READs keep landing meanwhile. */
    volatile long destroyDelayMs;
    /** Whether destroying a queue pair fails (it may be alive: nothing it holds goes back). */
    volatile boolean destroyFails;
    /**
     * Whether deregistering memory fails (ibv_dereg_mr returning an error): the registration is then left
     * as it was on the NIC, and the emulator keeps no reference to its memory (on a real NIC nothing in the
     * JVM would), so a test sees whether the provider keeps that memory itself. Counted in {@link #deregFailures}.
     */
    volatile boolean deregisterFails;
    /** Deregistrations that failed because {@link #deregisterFails} was set. */
    final AtomicInteger deregFailures = new AtomicInteger();
    /** While set, each deregistration counts down {@link #deregistering} and waits for it (uninterruptibly). */
    volatile java.util.concurrent.CountDownLatch deregisterGate;
    /** Counted down by each deregistration that waits at {@link #deregisterGate}. */
    volatile java.util.concurrent.CountDownLatch deregistering;
    /** Deregistrations that returned after their device was closed (a use after free on a real device). */
    final AtomicInteger deregsAfterClose = new AtomicInteger();
    /** Whether a second closeQuietly waits for the first one's destroy. */
    volatile boolean closeWaits = true;
    /** Whether connect requests carry private data to the listener (java.lang.foreign: yes; DiSNI: no). */
    volatile boolean carriesProof = true;
    /** The completion threads take nothing while set. */
    volatile boolean pollPaused;
    /** How long a completion thread spends on each completion it takes. */
    volatile long pollDelayMicros;
    /** How many completions a completion thread takes out of the queue at once (ibv_poll_cq's count). */
    volatile int pollBatch = 32;
    /** While set and not counted down, no READ lands (they wait on the wire, in order). */
    volatile java.util.concurrent.CountDownLatch landingGate;
    /**
     * When set when a device opens: its completions and its client queue pairs' disconnects go through the
     * DiSNI path's handler ({@link DisniEvents}, as {@link VerbsEndpoint} hands them on), with these as the
     * states of the device's ports.
     */
    volatile PortStates disniPorts;
    /** Runs once, in the next connect, before its request reaches the listener. */
    volatile Runnable beforeConnect;

    private final BitSet qpNumbers = new BitSet();
    /** Realm protection domains deallocated, and allocated, over every device of this adapter. */
    final AtomicInteger domainsDeallocated = new AtomicInteger();
    final AtomicInteger domainsOpened = new AtomicInteger();

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
        return new Device(node, bind.getAddress(), completionQueueSize);
    }

    private synchronized int allocateQpNumber() {
        int n = qpNumbers.nextClearBit(1);
        qpNumbers.set(n);
        return n;
    }

    private synchronized void freeQpNumber(int n) {
        qpNumbers.clear(n);
    }

    /** The device listening on {@code port}, for tests. */
    static Device listening(int port) {
        return LISTENING.get(port);
    }

    final class Device implements VerbsDevice {
        private final VerbsNode node;
        private final InetAddress address;
        private final int port = PORTS.incrementAndGet();
        private final int cqCapacity;
        private final Map<Integer, Mem> byKey = new ConcurrentHashMap<>();
        private final AtomicInteger keys = new AtomicInteger(0x1000);
        private long nextAddress = 0x10_0000_0000L;
        /** Client queue pairs by number: where the completion thread hands completions. */
        private final Map<Integer, Qp> byNumber = new ConcurrentHashMap<>();
        private final Set<ServerQp> accepted = ConcurrentHashMap.newKeySet();
        private final ScheduledExecutorService wire;
        private final ExecutorService cm;
        private final Thread poller;
        /** The DiSNI path's handler ({@link #disniPorts}), or null: completions go to the channel directly. */
        private final DisniEvents disni;
        // The completion queue: {qp number, wr_id, status}; guarded by cqLock.
        private final Object cqLock = new Object();
        private final ArrayDeque<long[]> cq = new ArrayDeque<>();
        private long produced;
        private long consumed;
        private final ArrayDeque<Object[]> barriers = new ArrayDeque<>();
        private volatile boolean closed;

        Device(VerbsNode node, InetAddress address, int cqCapacity) {
            this.node = node;
            this.address = address;
            this.cqCapacity = cqCapacity;
            this.wire = Executors.newSingleThreadScheduledExecutor(daemon("emulated-verbs-wire-" + port));
            this.cm = Executors.newSingleThreadExecutor(daemon("emulated-verbs-cm-" + port));
            PortStates ports = disniPorts;
            this.disni = ports == null ? null : new DisniEvents(node, ports);
            this.poller = new Thread(this::poll, "emulated-verbs-cq-" + port);
            poller.setDaemon(true);
            poller.start();
            LISTENING.put(port, this);
        }

        private static java.util.concurrent.ThreadFactory daemon(String name) {
            return r -> {
                Thread t = new Thread(r, name);
                t.setDaemon(true);
                return t;
            };
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
        public boolean carriesProof() {
            return carriesProof;
        }

        /** The default protection domain. */
        private final Pd defaultPd = new Pd();

        @Override
        public synchronized Memory register(Domain domain, ByteBuffer memory, int access) throws IOException {
            Pd pd = domain == null ? defaultPd : (Pd) domain;
            if (pd.deallocated) {
                throw new IOException("ibv_reg_mr: the protection domain is deallocated (emulated)");
            }
            long a = nextAddress;
            nextAddress += memory.capacity() + 4096L;
            Mem m = new Mem(this, memory, a, keys.incrementAndGet(), access, pd);
            pd.users.incrementAndGet();
            byKey.put(m.key, m);
            return m;
        }

        @Override
        public Domain openDomain() {
            domainsOpened.incrementAndGet();
            return new Pd();
        }

        @Override
        public QueuePair connect(InetSocketAddress target, long timeoutMs, byte[] privateData) throws IOException {
            Device peer = LISTENING.get(target.getPort());
            if (peer == null) {
                throw new IOException("emulated rdma_cm connect to " + target + " failed: nothing listens there");
            }
            Runnable hook = beforeConnect;
            if (hook != null) {
                beforeConnect = null;
                hook.run();
            }
            InetSocketAddress from = new InetSocketAddress(address, PORTS.incrementAndGet());
            AcceptedQueuePairs.Entry e = peer.node.admitQueuePair(from, carriesProof ? privateData : null);
            if (e == null) {
                throw new IOException("emulated rdma_cm connect to " + target + " failed: rejected");
            }
            Qp qp = new Qp(this, peer, from);
            ServerQp server = new ServerQp(peer, e, qp, e.domain() == null ? peer.defaultPd : (Pd) e.domain());
            qp.server = server;
            peer.accepted.add(server);
            if (!e.connected(server::close, System.nanoTime())) {
                server.close();
                qp.closeQuietly();
                throw new IOException("emulated rdma_cm connect to " + target + " failed: closed meanwhile");
            }
            return qp;
        }

        EmulatedVerbs factory() {
            return EmulatedVerbs.this;
        }

        /** Client queue pairs of this device that are not destroyed. */
        List<QueuePair> queuePairs() {
            return new ArrayList<>(byNumber.values());
        }

        /** Accepted queue pairs this device's listener holds now. */
        int acceptedQueuePairs() {
            return accepted.size();
        }

        /** The port flaps: every client queue pair of this device fails, flushing what it has pending. */
        void flap() {
            for (Qp qp : byNumber.values()) {
                qp.fail();
            }
        }

        /**
         * Reports {@code qp} disconnected to its node (the peer's disconnect request overtook READ responses
         * still on their way: they keep landing until the queue pair is destroyed).
         */
        void reportDisconnected(QueuePair qp) {
            cm.execute(() -> disconnected(qp));
        }

        /** A client queue pair disconnected: its node hears of it (through the DiSNI path's handler when set). */
        private void disconnected(QueuePair qp) {
            if (disni != null) {
                disni.onDisconnected(qp, false);
            } else {
                node.queuePairDisconnected(qp);
            }
        }

        /** How many completions wait in the completion queue now. */
        int queued() {
            synchronized (cqLock) {
                return cq.size();
            }
        }

        private void generate(int qpNumber, long wrId, int status) {
            completions.incrementAndGet();
            synchronized (cqLock) {
                if (cq.size() >= cqCapacity) {
                    overruns.incrementAndGet();
                    return;
                }
                cq.addLast(new long[] {qpNumber, wrId, status});
                produced++;
                deepest.accumulateAndGet(cq.size(), Math::max);
                cqLock.notifyAll();
            }
        }

        @Override
        public void afterCompletionsPolled(Runnable r) {
            synchronized (cqLock) {
                barriers.addLast(new Object[] {produced, r});
                cqLock.notifyAll();
            }
        }

        private void poll() {
            List<long[]> batch = new ArrayList<>();
            List<Runnable> due = new ArrayList<>();
            while (!closed) {
                synchronized (cqLock) {
                    while (!pollPaused && !cq.isEmpty() && batch.size() < pollBatch) {
                        batch.add(cq.pollFirst());
                    }
                    if (batch.isEmpty() && barriers.isEmpty()) {
                        try {
                            cqLock.wait(5);
                        } catch (InterruptedException e) {
                            return;
                        }
                        continue;
                    }
                }
                for (long[] wc : batch) {
                    long d = pollDelayMicros;
                    if (d > 0) {
                        try {
                            TimeUnit.MICROSECONDS.sleep(d);
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                    Qp qp = byNumber.get((int) wc[0]);
                    VerbsChannel c = qp == null ? null : qp.channel;
                    if (disni != null) {
                        disni.onCompletion(c, qp, wc[1], (int) wc[2]);
                    } else if (c != null) {
                        c.onCompletion(qp, wc[1], (int) wc[2]);
                    }
                    synchronized (cqLock) {
                        consumed++;
                    }
                }
                batch.clear();
                synchronized (cqLock) {
                    while (!barriers.isEmpty() && (long) barriers.peekFirst()[0] <= consumed) {
                        due.add((Runnable) barriers.pollFirst()[1]);
                    }
                    if (due.isEmpty() && pollPaused) {
                        try {
                            cqLock.wait(5);
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                }
                for (Runnable r : due) {
                    r.run();
                }
                due.clear();
            }
        }

        @Override
        public void closeListener() {
            LISTENING.remove(port, this);
            for (ServerQp s : accepted.toArray(new ServerQp[0])) {
                s.close();
            }
        }

        @Override
        public void close() {
            closeListener();
            for (Qp qp : byNumber.values()) {
                qp.closeQuietly();
            }
            closed = true;
            poller.interrupt();
            wire.shutdownNow();
            cm.shutdownNow();
            try {
                poller.join(5_000);
                wire.awaitTermination(5, TimeUnit.SECONDS);
                cm.awaitTermination(5, TimeUnit.SECONDS);
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
        final Pd pd;
        private boolean deregistered;

        Mem(Device device, ByteBuffer buf, long address, int key, int access, Pd pd) {
            this.pd = pd;
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
        public void deregister() throws IOException {
            java.util.concurrent.CountDownLatch gate = device.factory().deregisterGate;
            if (gate != null) {
                device.factory().deregistering.countDown();
                boolean interrupted = false;
                while (true) {
                    try {
                        gate.await();
                        break;
                    } catch (InterruptedException e) {
                        interrupted = true;
                    }
                }
                if (interrupted) {
                    Thread.currentThread().interrupt();
                }
            }
            if (device.closed) {
                device.factory().deregsAfterClose.incrementAndGet();
            }
            device.byKey.remove(key, this);
            if (device.factory().deregisterFails) {
                device.factory().deregFailures.incrementAndGet();
                throw new IOException("ibv_dereg_mr failed: Device or resource busy (emulated)");
            }
            if (!deregistered) {
                deregistered = true;
                pd.users.decrementAndGet();
            }
        }

        /** Whether [addr, addr + len) lies in this registration. */
        boolean covers(long addr, int len) {
            return addr >= address && addr + len <= address + buf.capacity();
        }
    }

    /** One READ on its way. */
    private record Read(long wrId, long local, int lkey, int length, long remote, int rkey, boolean signaled) {
    }

    /** A client queue pair. */
    private final class Qp implements QueuePair {
        private final Device device;
        private final Device peer;
        private final InetSocketAddress local;
        private final int number;
        private volatile VerbsChannel channel;
        private volatile ServerQp server;
        private final DestroyOnce destroy;
        // Guarded by this.
        private boolean destroyed;
        private boolean error;
        private final ArrayDeque<Read> pending = new ArrayDeque<>();
        private long lastLandingNanos;

        Qp(Device device, Device peer, InetSocketAddress local) {
            this.device = device;
            this.peer = peer;
            this.local = local;
            this.destroy = new DestroyOnce(device.node::deviceFailed);
            this.number = allocateQpNumber();
            device.byNumber.put(number, this);
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
        public InetSocketAddress localAddress() {
            return local;
        }

        @Override
        public CompletableFuture<Void> destroyed() {
            return destroy.destroyed();
        }

        @Override
        public synchronized void post(ReadChain chain, int k) throws IOException {
            if (destroyed || destroy.begun()) {
                throw new IOException("emulated queue pair destroyed");
            }
            int postNumber;
            synchronized (chains) {
                postNumber = chains.size();
                chains.add(k);
            }
            int take = postNumber == failPost ? Math.min(failAt, k) : k;
            long now = System.nanoTime();
            for (int j = 0; j < take; j++) {
                Read r = new Read(chain.wrId[j], chain.local[j], chain.lkey[j], chain.length[j], chain.remote[j],
                        chain.rkey[j], chain.signaled[j]);
                posted.incrementAndGet();
                if (r.signaled()) {
                    signaled.incrementAndGet();
                }
                pending.addLast(r);
                long at = Math.max(lastLandingNanos, now + TimeUnit.MILLISECONDS.toNanos(landingDelayMs));
                lastLandingNanos = at;
                device.wire.schedule(() -> execute(r), at - now, TimeUnit.NANOSECONDS);
            }
            if (take < k) {
                throw new IOException("emulated post_send failure at work request " + take + " of " + k);
            }
        }

        /** On the wire thread: the READ at the head lands (or fails, or is flushed). */
        private void execute(Read r) {
            java.util.concurrent.CountDownLatch gate = landingGate;
            if (gate != null) {
                try {
                    gate.await(60, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    return; // the device is closing
                }
            }
            land(r);
        }

        private synchronized void land(Read r) {
            if (destroyed || pending.peekFirst() != r) {
                return; // flushed or destroyed meanwhile
            }
            pending.pollFirst();
            int status;
            if (error) {
                status = WcStatus.WR_FLUSH_ERR;
            } else {
                Mem src = peer.byKey.get(r.rkey());
                Mem dst = device.byKey.get(r.lkey());
                ServerQp responder = server;
                if (src == null || (src.access & VerbsDevice.ACCESS_REMOTE_READ) == 0 || !src.covers(r.remote(), r.length())
                        || responder == null || src.pd != responder.pd) { // an rkey of another domain: as unknown
                    remoteAccessErrors.incrementAndGet();
                    status = WC_REM_ACCESS_ERR;
                } else if (dst == null || !dst.covers(r.local(), r.length())) {
                    status = WC_LOC_PROT_ERR;
                } else {
                    ByteBuffer from = src.buf.duplicate();
                    from.limit((int) (r.remote() - src.address) + r.length()).position((int) (r.remote() - src.address));
                    ByteBuffer to = dst.buf.duplicate();
                    to.position((int) (r.local() - dst.address));
                    to.put(from);
                    status = WcStatus.SUCCESS;
                }
                error = status != WcStatus.SUCCESS;
            }
            if (r.signaled() || status != WcStatus.SUCCESS) {
                device.generate(number, r.wrId(), status);
            }
        }

        /** The queue pair goes to the error state: what is pending is flushed, later posts too. */
        synchronized void fail() {
            if (destroyed) {
                return;
            }
            error = true;
            flushPending();
        }

        private void flushPending() {
            for (Read r; (r = pending.pollFirst()) != null;) {
                device.generate(number, r.wrId(), WcStatus.WR_FLUSH_ERR);
            }
        }

        /** The peer's accepted queue pair went away: this one fails and its node hears of a disconnect. */
        void peerDisconnected() {
            synchronized (this) {
                if (destroyed) {
                    return;
                }
                error = true;
                flushPending();
            }
            try {
                device.cm.execute(() -> device.disconnected(this));
            } catch (java.util.concurrent.RejectedExecutionException e) {
                // its node is closed already (a queue pair it could not destroy outlived it): nobody to tell
            }
        }

        @Override
        public void closeQuietly() {
            if (!destroy.begin(closeWaits ? CLOSE_WAIT_MS : 0)) {
                return;
            }
            try {
                long d = destroyDelayMs;
                if (d > 0) {
                    Thread.sleep(d); // the destroy has not reached the device yet: READs keep landing
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            if (destroyFails) {
                destroy.done(false);
                return;
            }
            synchronized (this) { // waits for a READ being copied
                destroyed = true;
                flushPending();
            }
            device.byNumber.remove(number, this);
            freeQpNumber(number);
            destroy.done(true);
            ServerQp s = server;
            if (s != null) {
                s.peerGone();
            }
        }

        @Override
        public String toString() {
            return "EmulatedQp[" + number + "]";
        }
    }

    /** A protection domain: what is in it (registrations, accepted queue pairs). */
    final class Pd implements VerbsDevice.Domain {
        final AtomicInteger users = new AtomicInteger();
        volatile boolean deallocated;

        @Override
        public synchronized void deallocate() throws IOException {
            if (deallocated) {
                return;
            }
            if (users.get() > 0) {
                throw new IOException("ibv_dealloc_pd failed: Device or resource busy (emulated: " + users.get()
                        + " registrations or queue pairs in it)");
            }
            deallocated = true;
            domainsDeallocated.incrementAndGet();
        }
    }

    /** The accepting side of a queue pair: it posts nothing. */
    private static final class ServerQp {
        private final Device device;
        private final AcceptedQueuePairs.Entry entry;
        private final Qp client;
        final Pd pd;
        private final java.util.concurrent.atomic.AtomicBoolean closed = new java.util.concurrent.atomic.AtomicBoolean();

        ServerQp(Device device, AcceptedQueuePairs.Entry entry, Qp client, Pd pd) {
            this.device = device;
            this.entry = entry;
            this.client = client;
            this.pd = pd;
            pd.users.incrementAndGet();
        }

        /** Closed on this side (the reaper, the listener closing): the client sees a disconnect. */
        void close() {
            if (closed.compareAndSet(false, true)) {
                entry.gone();
                device.accepted.remove(this);
                client.peerDisconnected();
                destroyed();
            }
        }

        /** The client destroyed its queue pair: this side disconnects. */
        void peerGone() {
            if (closed.compareAndSet(false, true)) {
                entry.gone();
                device.accepted.remove(this);
                destroyed();
            }
        }

        private void destroyed() {
            pd.users.decrementAndGet();
            entry.destroyed();
        }
    }
}
