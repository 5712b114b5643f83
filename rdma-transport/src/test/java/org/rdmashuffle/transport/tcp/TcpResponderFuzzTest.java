package org.rdmashuffle.transport.tcp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * 100,000 random and mutated frames against a live responder. An independent model of the protocol
 * predicts every reply the responder must send (status, length, payload) and where it must close the
 * connection; the test checks the responder byte for byte against it, so a reply byte from outside a
 * registration, a crash or a hang fails it. A good client is served afterwards.
 */
class TcpResponderFuzzTest {
    private static final int FRAMES_PER_CONNECTION = 500;
    private static final int CONNECTIONS = 200;
    private static final int MAX_CONTROL = 1024;
    private static final int PARALLEL = 4;
    private static final java.util.concurrent.ExecutorService READERS = java.util.concurrent.Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "fuzz-reader");
        t.setDaemon(true);
        return t;
    });

    private record Region(long base, int length, int rkey, boolean readable, ByteBuffer bytes) {
    }

    private record Expected(byte op, int status, int id, byte[] payload) {
    }

    @Test
    @Timeout(300)
    void shouldAnswerEveryFrameAsTheModelPredictsAndKeepServingWhenFramesAreRandomOrMutated() throws Exception {
        RdmaShuffleConf conf = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp",
                "spark.shuffle.rdma.maxControlMessageSize", "1k", "spark.shuffle.rdma.connectTimeout", "5s"));
        NodeOptions opts = NodeOptions.loopback().withControlHandler(req -> {
            ByteBuffer r = ByteBuffer.allocate(req.remaining() + 1);
            r.put((byte) 'E').put(req).flip();
            return r;
        });
        try (TcpNode server = new TcpNode(conf, opts)) {
            List<Region> regions = new ArrayList<>();
            SplittableRandom rnd = new SplittableRandom(2026);
            ByteBuffer a = randomDirect(rnd, 1 << 20);
            MemoryRegion ra = server.register(a, RegionAccess.REMOTE_READ);
            regions.add(model(ra, true, a));
            ByteBuffer b = randomDirect(rnd, 3000);
            MemoryRegion rb = server.register(b, RegionAccess.REMOTE_READ);
            regions.add(model(rb, true, b));
            ByteBuffer secret = ByteBuffer.allocateDirect(8192);
            while (secret.hasRemaining()) {
                secret.put((byte) 0xEE);
            }
            MemoryRegion rs = server.register(secret.clear(), RegionAccess.READ_SINK);
            regions.add(model(rs, false, secret));
            MemoryRegion gone = server.register(ByteBuffer.allocateDirect(4096), RegionAccess.REMOTE_READ);
            RegionDescriptor staleKey = gone.descriptor();
            gone.close();

            int port = server.localAddress().port();
            // Four connections at once, one of them reading its replies slowly, so replies with large
            // payloads stay pending on one connection while the others READ the same regions.
            java.util.concurrent.atomic.AtomicLong sentTotal = new java.util.concurrent.atomic.AtomicLong();
            java.util.concurrent.atomic.AtomicLong answeredTotal = new java.util.concurrent.atomic.AtomicLong();
            java.util.concurrent.atomic.AtomicInteger connectionCount = new java.util.concurrent.atomic.AtomicInteger();
            List<java.util.concurrent.Future<?>> workers = new ArrayList<>();
            java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(PARALLEL);
            try {
                for (int w = 0; w < PARALLEL; w++) {
                    SplittableRandom mine = rnd.split();
                    boolean slow = w == 0;
                    workers.add(pool.submit(() -> {
                        while (answeredTotal.get() < 100_000 && connectionCount.incrementAndGet() <= 5 * CONNECTIONS) {
                            long[] r = fuzzOneConnection(port, mine, regions, staleKey, slow);
                            sentTotal.addAndGet(r[0]);
                            answeredTotal.addAndGet(r[1]);
                        }
                        return null;
                    }));
                }
                for (java.util.concurrent.Future<?> f : workers) {
                    f.get(280, TimeUnit.SECONDS);
                }
            } finally {
                pool.shutdownNow();
            }
            long sent = sentTotal.get();
            long answered = answeredTotal.get();
            int connections = connectionCount.get();
            assertTrue(answered >= 100_000, "only " + answered + " of " + sent + " frames reached the responder's parser "
                    + "over " + connections + " connections");

            // The responder still serves a well-behaved client.
            try (TcpNode client = new TcpNode(conf, NodeOptions.loopback())) {
                RdmaChannel ch = client.connect(server.localAddress());
                ByteBuffer sinkMem = ByteBuffer.allocateDirect(4096);
                MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK);
                CompletableFuture<Integer> done = new CompletableFuture<>();
                ch.post(new ReadBatch(1).add(ra.descriptor().address() + 100, ra.descriptor().rkey(), 4096, sink, 0, 1),
                        (id, st, len) -> done.complete(st));
                assertEquals(ReadStatus.SUCCESS, done.get(10, TimeUnit.SECONDS));
                assertEquals(-1, sinkMem.clear().mismatch(a.duplicate().position(100).limit(4196)));
            }
        }
    }

    private static Region model(MemoryRegion r, boolean readable, ByteBuffer bytes) {
        RegionDescriptor d = r.descriptor();
        return new Region(d.address(), (int) d.length(), d.rkey(), readable, bytes);
    }

    private static ByteBuffer randomDirect(SplittableRandom rnd, int n) {
        ByteBuffer b = ByteBuffer.allocateDirect(n);
        byte[] tmp = new byte[n];
        rnd.nextBytes(tmp);
        return b.put(tmp).clear();
    }

    /**
     * Sends one connection's frames, reads everything the responder answers and checks it against the
     * model; returns {frames sent, frames the responder answered}.
     */
    private long[] fuzzOneConnection(int port, SplittableRandom rnd, List<Region> regions, RegionDescriptor stale,
                                     boolean slowReader) throws Exception {
        ByteArrayOutputStream stream = new ByteArrayOutputStream();
        boolean garbageHandshake = rnd.nextInt(20) == 0;
        if (garbageHandshake) {
            byte[] g = new byte[24 + 32];
            rnd.nextBytes(g);
            stream.write(g);
        } else {
            ByteBuffer hello = ByteBuffer.allocate(Wire.HELLO_BYTES + Wire.AUTH_BYTES);
            hello.putInt(Wire.MAGIC).putShort(Wire.VERSION).putShort((short) 0).put(new byte[16]).put(new byte[32]);
            stream.write(hello.array());
        }
        List<byte[]> frames = new ArrayList<>();
        for (int i = 0; i < FRAMES_PER_CONNECTION; i++) {
            frames.add(frame(rnd, regions, stale, i));
        }
        for (byte[] f : frames) {
            stream.write(f);
        }
        byte[] sent = stream.toByteArray();

        byte[] received;
        try (Socket s = new Socket()) {
            if (slowReader) {
                s.setReceiveBufferSize(4096); // before connecting, so the window stays small
            }
            s.connect(new java.net.InetSocketAddress("127.0.0.1", port), 10_000);
            s.setSoTimeout(20_000);
            CompletableFuture<byte[]> reader = CompletableFuture.supplyAsync(() -> readAll(s, slowReader), READERS);
            try {
                s.getOutputStream().write(sent);
                s.shutdownOutput();
            } catch (IOException e) {
                // The responder closed first (a malformed frame or handshake): what it sent is still checked.
            }
            received = reader.get(30, TimeUnit.SECONDS);
        }
        ByteBuffer in = ByteBuffer.wrap(received);
        if (garbageHandshake) {
            // Random bytes almost never carry the magic; either way nothing but handshake bytes may come back
            // unless the model accepts them, which it checks below only for a valid magic.
            ByteBuffer g = ByteBuffer.wrap(sent);
            // The node has no secret and no secrets per realm: version 2 or 3, neither auth nor realm flag.
            boolean valid = g.getInt() == Wire.MAGIC && (g.getShort(4) == 2 || g.getShort(4) == 3)
                    && (g.getShort(6) & 3) == 0;
            if (!valid) {
                assertTrue(received.length <= Wire.CHALLENGE_BYTES, "served after a bad handshake");
                return new long[] {frames.size(), 0};
            }
        }
        assertTrue(in.remaining() >= Wire.CHALLENGE_BYTES + Wire.WELCOME_BYTES, "no handshake reply");
        assertEquals(Wire.MAGIC, in.getInt());
        in.position(in.position() + 2);
        assertEquals(Wire.HS_OK, in.getShort());
        in.position(in.position() + 16);
        assertEquals(Wire.HS_OK, in.getInt());
        in.position(in.position() + 32);

        List<Expected> expected = predict(ByteBuffer.wrap(sent, Wire.HELLO_BYTES + Wire.AUTH_BYTES,
                sent.length - Wire.HELLO_BYTES - Wire.AUTH_BYTES), regions);
        for (int k = 0; k < expected.size(); k++) {
            Expected e = expected.get(k);
            String at = "reply " + k + " of " + expected.size();
            assertTrue(in.remaining() >= Wire.REPLY_HEADER_BYTES, at + ": missing");
            assertEquals(e.op, in.get(), at + ": opcode");
            assertEquals(e.status, in.get() & 0xFF, at + ": status");
            in.getShort();
            assertEquals(e.id, in.getInt(), at + ": id");
            int len = in.getInt();
            assertEquals(e.payload.length, len, at + ": length");
            byte[] got = new byte[len];
            in.get(got);
            assertEquals(-1, ByteBuffer.wrap(got).mismatch(ByteBuffer.wrap(e.payload)), at + ": payload");
        }
        assertEquals(0, in.remaining(), "bytes beyond the predicted replies");
        return new long[] {frames.size(), expected.size()};
    }

    private static byte[] readAll(Socket s, boolean slow) {
        try {
            InputStream in = s.getInputStream(); // closed with the socket, not here
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            byte[] buf = new byte[65536];
            try {
                for (int n; (n = in.read(buf, 0, slow ? 8192 : buf.length)) > 0; ) {
                    out.write(buf, 0, n);
                    if (slow) {
                        Thread.sleep(1);
                    }
                }
            } catch (java.net.SocketException reset) {
                // A reset after the responder closed on a malformed frame ends the stream like EOF.
            }
            return out.toByteArray();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    private static byte[] frame(SplittableRandom rnd, List<Region> regions, RegionDescriptor stale, int id) {
        Region good = regions.get(rnd.nextInt(2));
        ByteBuffer f = ByteBuffer.allocate(Wire.REQUEST_HEADER_BYTES);
        int kind = rnd.nextInt(100);
        long addr = good.base + rnd.nextInt(good.length);
        int len = 1 + rnd.nextInt(Math.min(2048, (int) (good.base + good.length - addr)));
        int rkey = good.rkey;
        byte op = Wire.OP_READ;
        if (kind < 40) {
            if (good == regions.get(0) && rnd.nextInt(8) == 0) {
                // A large READ: its payload is written from the region and may stay pending.
                addr = good.base + rnd.nextInt(good.length / 2);
                len = 8193 + rnd.nextInt(good.length / 2 - 8193);
            }
        } else if (kind < 50) {
            rkey = rnd.nextInt();
        } else if (kind < 55) {
            rkey = stale.rkey();
            addr = stale.address();
        } else if (kind < 65) {
            switch (rnd.nextInt(5)) {
                case 0 -> addr = good.base - 1 - rnd.nextInt(1000);
                case 1 -> addr = good.base + good.length - rnd.nextInt(10);
                case 2 -> len = Integer.MAX_VALUE - rnd.nextInt(100);
                case 3 -> len = -1 - rnd.nextInt(1000);
                default -> addr = rnd.nextLong();
            }
        } else if (kind < 70) {
            len = 0;
        } else if (kind < 75) {
            Region sink = regions.get(2);
            rkey = sink.rkey;
            addr = sink.base + rnd.nextInt(100);
            len = 1 + rnd.nextInt(100);
        } else if (kind < 79) {
            int body = rnd.nextInt(64);
            ByteBuffer c = ByteBuffer.allocate(Wire.REQUEST_HEADER_BYTES + body);
            c.put(Wire.OP_CONTROL).put(new byte[3]).putInt(id).putInt(body).putInt(0).putLong(0);
            byte[] bb = new byte[body];
            rnd.nextBytes(bb);
            return c.put(bb).array();
        } else if (kind < 80 && rnd.nextInt(4) == 0) {
            byte[] g = new byte[Wire.REQUEST_HEADER_BYTES];
            rnd.nextBytes(g);
            return g;
        }
        f.put(op).put(new byte[3]).putInt(id).putInt(len).putInt(rkey).putLong(addr);
        byte[] out = f.array();
        if (kind >= 80) {
            int flips = 1 + rnd.nextInt(3);
            boolean keepOpcode = rnd.nextInt(10) != 0; // most mutations hit the fields, some the opcode
            for (int i = 0; i < flips; i++) {
                int bit = keepOpcode ? 8 + rnd.nextInt((out.length - 1) * 8) : rnd.nextInt(out.length * 8);
                out[bit / 8] ^= (byte) (1 << (bit % 8));
            }
        }
        return out;
    }

    /** What the responder must answer to {@code stream}, per the protocol in docs/wire-format.md. */
    private static List<Expected> predict(ByteBuffer stream, List<Region> regions) {
        List<Expected> out = new ArrayList<>();
        while (stream.remaining() >= Wire.REQUEST_HEADER_BYTES) {
            byte op = stream.get();
            stream.position(stream.position() + 3);
            int id = stream.getInt();
            int len = stream.getInt();
            int rkey = stream.getInt();
            long addr = stream.getLong();
            if (op == Wire.OP_READ) {
                Region r = null;
                for (Region x : regions) {
                    if (x.rkey == rkey) {
                        r = x;
                    }
                }
                if (r == null) {
                    out.add(new Expected(Wire.OP_READ_REPLY, ReadStatus.UNKNOWN_KEY, id, new byte[0]));
                } else if (!r.readable) {
                    out.add(new Expected(Wire.OP_READ_REPLY, ReadStatus.ACCESS_DENIED, id, new byte[0]));
                } else if (len <= 0) {
                    out.add(new Expected(Wire.OP_READ_REPLY, ReadStatus.INVALID_LENGTH, id, new byte[0]));
                } else if (addr < r.base || addr - r.base > r.length || len > r.length - (addr - r.base)) {
                    out.add(new Expected(Wire.OP_READ_REPLY, ReadStatus.OUT_OF_BOUNDS, id, new byte[0]));
                } else {
                    byte[] p = new byte[len];
                    r.bytes.duplicate().position((int) (addr - r.base)).get(p);
                    out.add(new Expected(Wire.OP_READ_REPLY, ReadStatus.SUCCESS, id, p));
                }
            } else if (op == Wire.OP_CONTROL && len == 0) {
                out.add(new Expected(Wire.OP_CONTROL_REPLY, ReadStatus.SUCCESS, id, new byte[0])); // keep-alive
            } else if (op == Wire.OP_CONTROL && len >= 0 && len <= MAX_CONTROL) {
                if (stream.remaining() < len) {
                    return out; // body never completes: the responder sees the end and closes
                }
                byte[] p = new byte[len + 1];
                p[0] = 'E';
                stream.get(p, 1, len);
                out.add(new Expected(Wire.OP_CONTROL_REPLY, ReadStatus.SUCCESS, id, p));
            } else {
                out.add(new Expected(Wire.OP_ERROR, ReadStatus.MALFORMED_REQUEST, id, new byte[0]));
                return out;
            }
        }
        return out;
    }
}
