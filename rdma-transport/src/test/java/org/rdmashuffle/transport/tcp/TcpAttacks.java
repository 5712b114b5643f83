package org.rdmashuffle.transport.tcp;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The attacks of issue 24 (items 8–11) on a tcp node's responder, from raw sockets written to
 * docs/wire-format.md, and the honest peer that must still get in. Shared by
 * {@link TcpResponderAttackTest} (loopback, attacker on 127.0.0.x ≠ the honest peer's 127.0.0.1) and
 * {@link AttackHarness} (network namespaces, different hosts). Every attack is {@link AutoCloseable}:
 * {@code close()} stops its threads and closes its sockets.
 */
final class TcpAttacks {
    private TcpAttacks() {
    }

    /** A socket from {@code source} (any port) to {@code target}, blocking, with a read timeout. */
    static Socket open(InetSocketAddress target, InetAddress source, int timeoutMs) throws IOException {
        Socket s = new Socket();
        try {
            s.bind(new InetSocketAddress(source, 0));
            s.connect(target, timeoutMs);
            s.setSoTimeout(timeoutMs);
            return s;
        } catch (IOException | RuntimeException e) {
            s.close();
            throw e;
        }
    }

    /** A HELLO on {@code s}; with {@code auth}, naming the address {@code s} dialled (as clients with a secret do). */
    static byte[] hello(Socket s, boolean auth, byte[] clientNonce) {
        byte[] address = auth ? dialled(s) : new byte[0];
        return ByteBuffer.allocate(Wire.HELLO_BYTES + address.length).putInt(Wire.MAGIC).putShort(Wire.VERSION)
                .putShort((short) (auth ? Wire.FLAG_AUTH | Wire.FLAG_ADDRESS : 0)).put(clientNonce).put(address)
                .array();
    }

    /** The address field of the node {@code s} dialled, as the HELLO and the proofs carry it. */
    static byte[] dialled(Socket s) {
        return Handshake.addressField((InetSocketAddress) s.getRemoteSocketAddress());
    }

    /** A full handshake (with the secret's proof when {@code secret} is given); the handshake status the node sent. */
    static int handshake(Socket s, byte[] secret) throws IOException {
        byte[] clientNonce = Handshake.nonce();
        OutputStream out = s.getOutputStream();
        DataInputStream in = new DataInputStream(s.getInputStream());
        out.write(hello(s, secret != null, clientNonce));
        byte[] challenge = new byte[Wire.CHALLENGE_BYTES];
        in.readFully(challenge);
        ByteBuffer c = ByteBuffer.wrap(challenge);
        c.getInt();
        c.getShort();
        int status = c.getShort();
        if (status != Wire.HS_OK) {
            return status;
        }
        byte[] serverNonce = new byte[Wire.NONCE_BYTES];
        c.get(serverNonce);
        out.write(Handshake.proof(secret, 'c', serverNonce, clientNonce, secret == null ? null : dialled(s), null));
        byte[] welcome = new byte[Wire.WELCOME_BYTES];
        in.readFully(welcome);
        return ByteBuffer.wrap(welcome).getInt();
    }

    private static void closeAll(List<Socket> sockets) {
        synchronized (sockets) {
            for (Socket s : sockets) {
                try {
                    s.close();
                } catch (IOException ignored) {
                    // closing an attacker's socket
                }
            }
            sockets.clear();
        }
    }

    private static Thread daemon(String name, Runnable r) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        t.start();
        return t;
    }

    private static void join(List<Thread> threads) {
        for (Thread t : threads) {
            try {
                t.join(10_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    /**
     * Item 8: sockets without the secret that get their handshake refused and then stay open. Half send
     * a HELLO with the authentication flag and a wrong proof (refused: authentication failed), half any 24
     * bytes (refused: bad version). Each reads what the node answers and keeps its socket open.
     */
    static final class RefusedHandshakes implements AutoCloseable {
        final List<Socket> sockets = new ArrayList<>();
        /** Refusals seen: status 3 (wrong proof) or 1 (bad magic), 4 (busy), or reset/closed before any status. */
        int refusedAuth;
        int refusedVersion;
        int refusedBusy;
        int reset;

        RefusedHandshakes(InetSocketAddress target, InetAddress[] sources, int count) throws IOException {
            SplittableRandom rnd = new SplittableRandom(8);
            try {
                for (int i = 0; i < count; i++) {
                    Socket s = open(target, sources[i % sources.length], 5000);
                    sockets.add(s);
                    try {
                        DataInputStream in = new DataInputStream(s.getInputStream());
                        byte[] challenge = new byte[Wire.CHALLENGE_BYTES];
                        if (i % 2 == 0) {
                            byte[] wrongProof = new byte[Wire.PROOF_BYTES];
                            rnd.nextBytes(wrongProof);
                            s.getOutputStream().write(hello(s, true, Handshake.nonce()));
                            in.readFully(challenge);
                            int status = ByteBuffer.wrap(challenge).getShort(6);
                            if (status == Wire.HS_BUSY) {
                                refusedBusy++;
                                continue;
                            }
                            s.getOutputStream().write(wrongProof);
                            byte[] welcome = new byte[Wire.WELCOME_BYTES];
                            in.readFully(welcome);
                            if (ByteBuffer.wrap(welcome).getInt() == Wire.HS_AUTH_FAILED) {
                                refusedAuth++;
                            }
                        } else {
                            byte[] any = new byte[Wire.HELLO_BYTES];
                            rnd.nextBytes(any);
                            any[0] = 0x41; // never the magic
                            s.getOutputStream().write(any);
                            in.readFully(challenge);
                            int status = ByteBuffer.wrap(challenge).getShort(6);
                            if (status == Wire.HS_BUSY) {
                                refusedBusy++;
                            } else if (status == Wire.HS_BAD_VERSION) {
                                refusedVersion++;
                            }
                        }
                    } catch (IOException closedOrReset) {
                        reset++; // evicted, or refused busy with a reset: the socket stays in the list
                    }
                }
            } catch (IOException | RuntimeException e) {
                closeAll(sockets);
                throw e;
            }
        }

        @Override
        public String toString() {
            return sockets.size() + " sockets: refused auth " + refusedAuth + ", bad version " + refusedVersion
                    + ", busy " + refusedBusy + ", reset " + reset;
        }

        @Override
        public void close() {
            closeAll(sockets);
        }
    }

    /**
     * Item 9: connections that get their HELLO refused (a wrong magic) and then send as fast as they can;
     * each thread connects again when the node resets it. Records how long a refused connection lived
     * after its refusal (the longest) and how many there were. {@code trickle} sends one byte every
     * 50 ms instead, to show the time bound rather than the byte bound.
     */
    static final class RefusedFlood implements AutoCloseable {
        private final AtomicBoolean stop = new AtomicBoolean();
        private final List<Thread> threads = new ArrayList<>();
        private final List<Socket> sockets = new ArrayList<>();
        final AtomicLong connections = new AtomicLong();
        final AtomicLong refused = new AtomicLong();
        final AtomicLong bytesSent = new AtomicLong();
        final AtomicLong longestLifeNanos = new AtomicLong();
        /** Lifetime of the connection alive now, per thread (0 when none): a connection never reset shows here. */
        private final long[] aliveSince;

        RefusedFlood(InetSocketAddress target, InetAddress[] sources, int senders, boolean trickle) {
            aliveSince = new long[senders];
            for (int i = 0; i < senders; i++) {
                int me = i;
                InetAddress source = sources[i % sources.length];
                threads.add(daemon("refused-flood-" + i, () -> floodLoop(target, source, me, trickle)));
            }
        }

        private void floodLoop(InetSocketAddress target, InetAddress source, int me, boolean trickle) {
            byte[] garbage = new byte[64 << 10];
            new SplittableRandom(me).nextBytes(garbage);
            while (!stop.get()) {
                Socket s;
                try {
                    s = open(target, source, 5000);
                } catch (IOException e) {
                    pause(10);
                    continue;
                }
                synchronized (sockets) {
                    if (stop.get()) {
                        closeQuietly(s);
                        return;
                    }
                    sockets.add(s);
                }
                connections.incrementAndGet();
                long since = 0;
                try {
                    OutputStream out = s.getOutputStream();
                    byte[] bad = new byte[Wire.HELLO_BYTES];
                    bad[0] = 0x41;
                    out.write(bad);
                    byte[] challenge = new byte[Wire.CHALLENGE_BYTES];
                    new DataInputStream(s.getInputStream()).readFully(challenge);
                    if (ByteBuffer.wrap(challenge).getShort(6) != Wire.HS_BAD_VERSION) {
                        continue; // busy: not this attack
                    }
                    refused.incrementAndGet();
                    since = System.nanoTime();
                    aliveSince[me] = since;
                    while (!stop.get()) {
                        if (trickle) {
                            out.write(0x42);
                            bytesSent.incrementAndGet();
                            pause(50);
                        } else {
                            out.write(garbage);
                            bytesSent.addAndGet(garbage.length);
                        }
                    }
                } catch (IOException resetOrClosed) {
                    // the node reset it: that is what the bound does
                } finally {
                    aliveSince[me] = 0;
                    if (since != 0 && !stop.get()) {
                        long life = System.nanoTime() - since;
                        longestLifeNanos.accumulateAndGet(life, Math::max);
                    }
                    synchronized (sockets) {
                        sockets.remove(s);
                    }
                    closeQuietly(s);
                }
            }
        }

        /** The longest a refused connection lived after its refusal, counting those still alive now. */
        long longestLifeMs() {
            long now = System.nanoTime();
            long longest = longestLifeNanos.get();
            for (long since : aliveSince) {
                if (since != 0) {
                    longest = Math.max(longest, now - since);
                }
            }
            return TimeUnit.NANOSECONDS.toMillis(longest);
        }

        @Override
        public String toString() {
            return connections.get() + " connections, " + refused.get() + " refused, " + (bytesSent.get() >> 20)
                    + " MiB sent after refusals, longest life after a refusal " + longestLifeMs() + " ms";
        }

        @Override
        public void close() {
            stop.set(true);
            closeAll(sockets);
            join(threads);
        }
    }

    /**
     * Item 10: handshaken connections (with the secret: an insider) that send empty CONTROL frames
     * (keep-alives) as fast as they can, 2,730 to a write, and read and drop the replies.
     */
    static final class KeepAliveFlood implements AutoCloseable {
        private final AtomicBoolean stop = new AtomicBoolean();
        private final List<Thread> threads = new ArrayList<>();
        private final List<Socket> sockets = new ArrayList<>();
        final AtomicLong framesSent = new AtomicLong();
        final AtomicLong replyBytes = new AtomicLong();

        KeepAliveFlood(InetSocketAddress target, InetAddress[] sources, int connections, byte[] secret)
                throws IOException {
            ByteBuffer frames = ByteBuffer.allocate(2730 * Wire.REQUEST_HEADER_BYTES);
            for (int id = 0; frames.hasRemaining(); id++) {
                frames.put(Wire.OP_CONTROL).put(new byte[3]).putInt(id).putInt(0).putInt(0).putLong(0);
            }
            byte[] burst = frames.array();
            try {
                for (int i = 0; i < connections; i++) {
                    Socket s = open(target, sources[i % sources.length], 10_000);
                    sockets.add(s);
                    int status = handshake(s, secret);
                    if (status != Wire.HS_OK) {
                        throw new IOException("the flooder's handshake was refused: " + Wire.handshakeStatus(status));
                    }
                    s.setSoTimeout(0);
                }
            } catch (IOException | RuntimeException e) {
                closeAll(sockets);
                throw e;
            }
            for (int i = 0; i < sockets.size(); i++) {
                Socket s = sockets.get(i);
                threads.add(daemon("keepalive-flood-w" + i, () -> {
                    try {
                        OutputStream out = s.getOutputStream();
                        while (!stop.get()) {
                            out.write(burst);
                            framesSent.addAndGet(burst.length / Wire.REQUEST_HEADER_BYTES);
                        }
                    } catch (IOException e) {
                        // closed by close()
                    }
                }));
                threads.add(daemon("keepalive-flood-r" + i, () -> {
                    byte[] sink = new byte[64 << 10];
                    try {
                        InputStream in = s.getInputStream();
                        int n;
                        while (!stop.get() && (n = in.read(sink)) >= 0) {
                            replyBytes.addAndGet(n);
                        }
                    } catch (IOException e) {
                        // closed by close()
                    }
                }));
            }
        }

        @Override
        public String toString() {
            return sockets.size() + " connections, " + framesSent.get() + " keep-alives sent, "
                    + replyBytes.get() / Wire.REPLY_HEADER_BYTES + " answered";
        }

        @Override
        public void close() {
            stop.set(true);
            closeAll(sockets);
            join(threads);
        }
    }

    /** Item 11: handshaken connections that then say nothing; those refused (busy) are closed and counted. */
    static final class IdleHandshaken implements AutoCloseable {
        final List<Socket> held = new ArrayList<>();
        int refused;

        IdleHandshaken(InetSocketAddress target, InetAddress[] sources, int count, byte[] secret) throws IOException {
            try {
                for (int i = 0; i < count; i++) {
                    Socket s = open(target, sources[i % sources.length], 5000);
                    int status;
                    try {
                        status = handshake(s, secret);
                    } catch (IOException resetWhenRefused) {
                        status = Wire.HS_BUSY;
                    }
                    if (status == Wire.HS_OK) {
                        held.add(s);
                    } else {
                        refused++;
                        s.close();
                    }
                }
            } catch (IOException | RuntimeException e) {
                closeAll(held);
                throw e;
            }
        }

        @Override
        public String toString() {
            return held.size() + " handshaken and held, " + refused + " refused";
        }

        @Override
        public void close() {
            closeAll(held);
        }
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException ignored) {
            // an attacker's socket
        }
    }

    private static void pause(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** What the honest peer got: time to connect (with its retries), the slowest of its READs, all its READs. */
    record HonestResult(long connectMs, long slowestReadMs, long totalMs) {
    }

    /**
     * The honest peer: a tcp node of its own connects to {@code server} with its configured retries and
     * READs {@code length} bytes at {@code offset} of the region {@code d} {@code reads} times, one after
     * the other; the bytes must equal {@code expected}'s. Throws when it cannot connect, a READ fails or
     * its bytes differ.
     */
    static HonestResult honestRead(RdmaShuffleConf clientConf, NodeOptions options, NodeAddress server,
                                   RegionDescriptor d, ByteBuffer expected, int offset, int length, int reads,
                                   long readTimeoutMs) throws Exception {
        try (TcpNode client = new TcpNode(clientConf, options)) {
            long t0 = System.nanoTime();
            RdmaChannel ch = client.connect(server);
            long connected = System.nanoTime();
            long slowest = 0;
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(length);
            try (MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK)) {
                for (int i = 0; i < reads; i++) {
                    for (int k = 0; k < length; k++) {
                        sinkMem.put(k, (byte) ~expected.get(offset + k)); // so stale bytes never pass
                    }
                    long r0 = System.nanoTime();
                    CompletableFuture<Integer> done = new CompletableFuture<>();
                    ch.post(new ReadBatch(1).add(d.address() + offset, d.rkey(), length, sink, 0, i),
                            (id, st, len) -> done.complete(st));
                    int status = done.get(readTimeoutMs, TimeUnit.MILLISECONDS);
                    slowest = Math.max(slowest, System.nanoTime() - r0);
                    if (status != ReadStatus.SUCCESS) {
                        throw new IOException("the honest READ failed with status " + status);
                    }
                    int m = sinkMem.clear().mismatch(expected.duplicate().clear().position(offset).limit(offset + length));
                    if (m != -1) {
                        throw new IOException("the honest READ came back different from byte " + m);
                    }
                }
            }
            long end = System.nanoTime();
            return new HonestResult(TimeUnit.NANOSECONDS.toMillis(connected - t0), TimeUnit.NANOSECONDS.toMillis(slowest),
                    TimeUnit.NANOSECONDS.toMillis(end - t0));
        }
    }

    /** Deterministic content for a served region, so a peer in another process can check it byte for byte. */
    static ByteBuffer content(long seed, int n) {
        byte[] b = new byte[n];
        new SplittableRandom(seed).nextBytes(b);
        return ByteBuffer.allocateDirect(n).put(b).clear();
    }
}
