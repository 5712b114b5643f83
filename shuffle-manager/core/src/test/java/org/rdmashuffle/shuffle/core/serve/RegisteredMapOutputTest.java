package org.rdmashuffle.shuffle.core.serve;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

class RegisteredMapOutputTest {
    private static final RdmaShuffleConf TCP = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp"));

    @Test
    @Timeout(60)
    void shouldServeEveryPartitionByteForByteWhenOutputSpansSeveralRegions(@TempDir Path dir) throws Exception {
        byte[] data = new byte[1_000_003];
        new SplittableRandom(4).nextBytes(data);
        Path file = dir.resolve("shuffle_0_7_0.data");
        Files.write(file, data);
        long[] offsets = {0, 10, 10, 400_000, 999_000, 1_000_003};
        MapOutputLayout layout = new MapOutputLayout(offsets, 128 << 10); // 8 regions
        try (RdmaNode server = RdmaTransport.open(TCP, NodeOptions.loopback());
             RdmaNode client = RdmaTransport.open(TCP, NodeOptions.loopback());
             RegisteredMapOutput out = RegisteredMapOutput.register(server, file, layout)) {
            assertEquals(8, out.regionCount());
            assertEquals(1_000_003, server.stats().registeredBytes());
            ByteBuffer sinkMem = ByteBuffer.allocateDirect(data.length);
            MemoryRegion sink = client.register(sinkMem, RegionAccess.READ_SINK);
            RdmaChannel ch = client.connect(server.localAddress());
            for (int p = 0; p < layout.numPartitions(); p++) {
                ReadBatch batch = new ReadBatch(16);
                int[] dstOff = {0};
                int n = layout.forEachPiece(p, p + 1, 64 << 10, (r, off, len) -> {
                    RegionDescriptor d = out.region(r);
                    batch.add(d.address() + off, d.rkey(), len, sink, dstOff[0], dstOff[0]);
                    dstOff[0] += len;
                });
                if (n == 0) {
                    assertEquals(0, layout.bytesOf(p, p + 1));
                    continue;
                }
                CountDownLatch done = new CountDownLatch(n);
                AtomicInteger failures = new AtomicInteger();
                ch.post(batch, (id, st, len) -> {
                    if (st != ReadStatus.SUCCESS) {
                        failures.incrementAndGet();
                    }
                    done.countDown();
                });
                assertTrue(done.await(20, TimeUnit.SECONDS));
                assertEquals(0, failures.get());
                ByteBuffer expected = ByteBuffer.wrap(data, (int) offsets[p], (int) layout.bytesOf(p, p + 1));
                assertEquals(-1, sinkMem.duplicate().limit(dstOff[0]).mismatch(expected), "partition " + p);
            }
            sink.close();
        }
    }

    @Test
    @Timeout(30)
    void shouldReleaseRegisteredRegionsWhenRegistrationFailsPartWay(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("short.data");
        Files.write(file, new byte[1000]);
        // The index claims more bytes than the file has: the last region cannot be mapped.
        MapOutputLayout layout = new MapOutputLayout(new long[] {0, 600, 1500}, 500);
        try (RdmaNode server = RdmaTransport.open(TCP, NodeOptions.loopback())) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> RegisteredMapOutput.register(server, file, layout));
            assertTrue(e.getMessage().contains("beyond the end"), e.getMessage());
            assertEquals(0, server.stats().registeredRegions());
            assertEquals(0, server.stats().registeredBytes());
        }
    }
}
