package org.rdmashuffle.shuffle.core.fetch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.CONF;
import static org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.eventually;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.GatedChannel;
import org.rdmashuffle.shuffle.core.fetch.FetcherFixtures.Outputs;
import org.rdmashuffle.shuffle.core.format.MapOutputLayout;
import org.rdmashuffle.shuffle.core.serve.RegisteredMapOutput;
import org.rdmashuffle.shuffle.core.serve.RegisteredOutputTable;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadListener;
import org.rdmashuffle.transport.TransportException;

/** {@link ReadPoster}: a buffer goes back to the pool only when no READ can land in it any more. */
class ReadPosterTest {
    /** A channel that accepts every READ (through the gate) and then throws, as a channel failing mid-post may. */
    private static final class ThrowsAfterAccepting implements RdmaChannel {
        private final GatedChannel gate;

        ThrowsAfterAccepting(GatedChannel gate) {
            this.gate = gate;
        }

        @Override
        public NodeAddress peer() {
            return gate.peer();
        }

        @Override
        public void post(ReadBatch batch, ReadListener listener) throws TransportException {
            gate.post(batch, listener);
            throw new IllegalStateException("the requester's selector closed after the READs were queued");
        }

        @Override
        public CompletableFuture<ByteBuffer> call(ByteBuffer request) {
            return gate.call(request);
        }

        @Override
        public boolean isOpen() {
            return gate.isOpen();
        }

        @Override
        public void close() {
            gate.close();
        }
    }

    @Test
    @Timeout(120)
    void shouldKeepABufferOutOfThePoolUntilItsReadsLandWhenPostThrowsAfterAcceptingThem(@TempDir Path dir)
            throws Exception {
        try (RdmaNode executor = RdmaTransport.open(CONF, NodeOptions.loopback());
             RdmaNode reducer = RdmaTransport.open(CONF, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(CONF), reducer.sinkRegistrar())) {
            Outputs out = new Outputs(executor, dir, 50, 1, 1, 10_000, 3);
            GatedChannel[] gate = new GatedChannel[1];
            RdmaNode node = (RdmaNode) Proxy.newProxyInstance(RdmaNode.class.getClassLoader(),
                    new Class<?>[] {RdmaNode.class}, (proxy, method, args) -> {
                        try {
                            Object result = method.invoke(reducer, args);
                            if (method.getName().equals("connect")) {
                                gate[0] = new GatedChannel((RdmaChannel) result);
                                return new ThrowsAfterAccepting(gate[0]);
                            }
                            return result;
                        } catch (InvocationTargetException e) {
                            throw e.getCause();
                        }
                    });
            try (RegisteredOutputTable table = out.table;
                 BlockFetcher fetcher = new BlockFetcher(node, pool, 1 << 20, 64 << 10, 60_000)) {
                BlockFetcher.Request r = out.request(executor.localAddress(), 0, 0, 1);
                fetcher.add(r); // its slot READ is accepted, then post throws
                FetchFailure f = assertThrows(FetchFailure.class, fetcher::next);
                assertEquals(r, f.request());
                gate[0].awaitLanded(0); // the READ wrote into the buffer: it was in flight all along
                assertEquals(1, pool.stats().inUseBuffers(),
                        "the buffer went back to the pool while a READ accepted into it was in flight");
                assertEquals(1, fetcher.buffersWithheld(), "the buffer kept out of the pool was not counted");
                gate[0].release(0);
                assertTrue(eventually(60, () -> {
                    fetcher.progress();
                    return pool.stats().inUseBuffers() == 0;
                }), "the buffer never came back once its READ landed: " + pool.stats());
                assertEquals(0, fetcher.readsInFlight(), "READs counted twice or never");
                assertEquals(0, fetcher.bytesInFlight(), "bytes counted twice or never");
                assertEquals(0, fetcher.outstanding(), "the failed request came out twice");
            }
            assertEquals(0, pool.stats().leaksDetected());
        }
    }
}
