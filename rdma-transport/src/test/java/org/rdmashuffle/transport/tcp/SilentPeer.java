package org.rdmashuffle.transport.tcp;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.TransportException;

/**
 * A peer that completes the tcp handshake of one connection, then reads its requests and answers none (a hung or
 * frozen executor). Closing it closes its listening socket.
 */
final class SilentPeer implements AutoCloseable {
    private final ServerSocket socket;

    SilentPeer() throws IOException {
        socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
        Thread peer = new Thread(() -> {
            try (Socket s = socket.accept()) {
                DataInputStream in = new DataInputStream(s.getInputStream());
                in.readFully(new byte[Wire.HELLO_BYTES]);
                OutputStream out = s.getOutputStream();
                out.write(ByteBuffer.allocate(Wire.CHALLENGE_BYTES).putInt(Wire.MAGIC).putShort(Wire.VERSION)
                        .putShort((short) 0).array());
                in.readFully(new byte[Wire.AUTH_BYTES]);
                out.write(new byte[Wire.WELCOME_BYTES]);
                out.flush();
                while (in.read() >= 0) {
                    // swallow requests, answer none
                }
            } catch (Exception e) {
                // the client gave up and closed
            }
        });
        peer.setDaemon(true);
        peer.start();
    }

    NodeAddress address() {
        return new NodeAddress("127.0.0.1", socket.getLocalPort(), "tcp");
    }

    int port() {
        return socket.getLocalPort();
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }

    /** One READ (of a key the peer never answers for) posted on {@code ch}: when and how it completed. */
    static final class PendingRead {
        final long postedNanos = System.nanoTime();
        private final CountDownLatch done = new CountDownLatch(1);
        private final AtomicInteger status = new AtomicInteger(-1);
        private final AtomicLong completedNanos = new AtomicLong();

        PendingRead(RdmaChannel ch, MemoryRegion sink) throws TransportException {
            ReadBatch b = new ReadBatch(1);
            b.add(1L << 32, 1234, 100, sink, 0, 0);
            ch.post(b, (id, st, len) -> {
                completedNanos.set(System.nanoTime());
                status.set(st);
                done.countDown();
            });
        }

        boolean await(long ms) throws InterruptedException {
            return done.await(ms, TimeUnit.MILLISECONDS);
        }

        boolean completed() {
            return done.getCount() == 0;
        }

        /** Its completion status ({@link org.rdmashuffle.transport.ReadStatus}), -1 before it completed. */
        int status() {
            return status.get();
        }

        /** Milliseconds from its post to its completion. */
        long completedAfterMs() {
            return TimeUnit.NANOSECONDS.toMillis(completedNanos.get() - postedNanos);
        }
    }
}
