package org.rdmashuffle.benchmarks;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.infra.Blackhole;

/**
 * The baseline: a plain NIO socket copy loop on loopback. One operation asks a server thread for
 * {@link TcpReadBenchmark#BYTES_PER_OP} bytes, which it writes from a direct buffer in pieces of
 * {@code readBytes}; the client reads them into a direct buffer of that size. No framing, no
 * registration table, no completions: what the tcp provider is measured against.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
public class NioSocketBenchmark {
    @Param({"65536", "1048576"})
    public int readBytes;

    private ServerSocketChannel listener;
    private SocketChannel client;
    private Thread serverThread;
    private ByteBuffer request;
    private ByteBuffer sink;

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        listener = ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0));
        final int size = readBytes;
        serverThread = new Thread(() -> serve(size), "nio-baseline-server");
        serverThread.setDaemon(true);
        serverThread.start();
        client = SocketChannel.open(listener.getLocalAddress());
        client.socket().setTcpNoDelay(true);
        request = ByteBuffer.allocateDirect(8);
        sink = ByteBuffer.allocateDirect(readBytes);
    }

    private void serve(int size) {
        try (SocketChannel s = listener.accept()) {
            s.socket().setTcpNoDelay(true);
            ByteBuffer src = ByteBuffer.allocateDirect(size);
            ByteBuffer req = ByteBuffer.allocateDirect(8);
            for (;;) {
                req.clear();
                while (req.hasRemaining()) {
                    if (s.read(req) < 0) {
                        return;
                    }
                }
                long left = req.getLong(0);
                while (left > 0) {
                    src.clear();
                    while (src.hasRemaining()) {
                        s.write(src);
                    }
                    left -= size;
                }
            }
        } catch (IOException e) {
            // the benchmark closed the connection
        }
    }

    @Benchmark
    public long readSixteenMiB(Blackhole bh) throws IOException {
        request.clear();
        request.putLong(0, TcpReadBenchmark.BYTES_PER_OP);
        while (request.hasRemaining()) {
            client.write(request);
        }
        long got = 0;
        while (got < TcpReadBenchmark.BYTES_PER_OP) {
            sink.clear();
            while (sink.hasRemaining()) {
                int n = client.read(sink);
                if (n < 0) {
                    throw new IOException("server closed");
                }
            }
            got += sink.capacity();
        }
        bh.consume(sink.getLong(0));
        return got;
    }

    @TearDown(Level.Trial)
    public void tearDown() throws IOException {
        client.close();
        listener.close();
    }
}
