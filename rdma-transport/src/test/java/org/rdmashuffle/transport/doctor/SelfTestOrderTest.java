package org.rdmashuffle.transport.doctor;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;
import org.rdmashuffle.transport.TransportChoice;

/** The self-test's READ window against a channel that completes READs in another order than they were posted. */
class SelfTestOrderTest {
    private static final long BASE = 0x10_0000L;
    private static final long SEED = 42;

    /** One READ held back: where it reads from, where it lands, and whom to tell. */
    private record Held(long remoteOffset, int dstOffset, int length, long id, ReadListener listener) {
    }

    /**
     * Holds READs until {@code hold} are in flight (or the last one is posted), then completes the newest first:
     * copies its bytes from {@code served} into {@code sink} and tells its listener.
     */
    private static final class LastInFirstOutChannel implements RdmaChannel {
        private final ByteBuffer served;
        private final ByteBuffer sink;
        private final int hold;
        private final int total;
        private final Deque<Held> pending = new ArrayDeque<>();
        private int posted;

        LastInFirstOutChannel(ByteBuffer served, ByteBuffer sink, int hold, int total) {
            this.served = served;
            this.sink = sink;
            this.hold = hold;
            this.total = total;
        }

        @Override
        public NodeAddress peer() {
            return new NodeAddress("127.0.0.1", 1, "tcp");
        }

        @Override
        public void post(ReadBatch batch, ReadListener listener) {
            for (int i = 0; i < batch.size(); i++) {
                pending.push(new Held(batch.remoteAddress(i) - BASE, batch.dstOffset(i), batch.length(i),
                        batch.requestId(i), listener));
                posted++;
            }
            while (pending.size() >= hold || posted == total && !pending.isEmpty()) {
                Held h = pending.pop();
                ByteBuffer from = served.duplicate().position((int) h.remoteOffset()).limit((int) h.remoteOffset()
                        + h.length());
                sink.duplicate().position(h.dstOffset()).put(from);
                h.listener().onReadComplete(h.id(), ReadStatus.SUCCESS, h.length());
            }
        }

        @Override
        public CompletableFuture<ByteBuffer> call(ByteBuffer request) {
            throw new UnsupportedOperationException();
        }

        @Override
        public boolean isOpen() {
            return true;
        }

        @Override
        public void close() {
        }
    }

    private static MemoryRegion sinkRegion(int length) {
        return new MemoryRegion() {
            @Override
            public RegionDescriptor descriptor() {
                return new RegionDescriptor(0, length, 1);
            }

            @Override
            public RegionAccess access() {
                return RegionAccess.READ_SINK;
            }

            @Override
            public int length() {
                return length;
            }

            @Override
            public boolean isOpen() {
                return true;
            }

            @Override
            public void close() {
            }
        };
    }

    @Test
    void shouldVerifyEachReadInTheSlotItWasPostedIntoWhenCompletionsComeOutOfOrder() throws Exception {
        int size = 4096;
        int reads = 32;
        ByteBuffer region = ByteBuffer.allocateDirect(64 * size);
        SelfTestPattern.fill(region, SEED);
        ByteBuffer sink = ByteBuffer.allocateDirect(8 * size);
        SelfTestPattern.Served served = new SelfTestPattern.Served(new RegionDescriptor(BASE, region.capacity(), 9),
                SEED);
        LastInFirstOutChannel ch = new LastInFirstOutChannel(region, sink, 8, reads);
        SelfTestResult r = SelfTestPeer.readWindowed(ch, ch.peer(), TransportChoice.tcp("test", false), served,
                sinkRegion(sink.capacity()), sink, reads, size, 10_000);
        assertEquals(reads, r.reads());
        assertEquals((long) reads * size, r.bytesVerified());
    }
}
