package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.RdmaChannel;
import org.rdmashuffle.transport.ReadBatch;
import org.rdmashuffle.transport.ReadStatus;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * What a peer can make a verbs node hold in queue pairs: at most {@code maxConnectionsPerAddress} from
 * one source address and {@code maxConnections} in all (refusals counted), and none for longer than
 * {@code idleTimeout} without a keep-alive — a peer host that lost power leaves no queue pair in RTS,
 * while live channels keep theirs. Over {@link EmulatedVerbs}, with nodes on different loopback addresses.
 */
class VerbsQueuePairLimitsTest {
    private static final int BLOCK = 4096;

    private static QueuePair bareQueuePair(VerbsNode from, VerbsNode to) throws IOException {
        return from.openEndpoint(to.localAddress(), new InetSocketAddress(to.localAddress().host(), to.rdmaPort()),
                5_000);
    }

    private static int readOnce(RdmaChannel ch, RegionDescriptor d, MemoryRegion sink) throws Exception {
        CompletableFuture<Integer> done = new CompletableFuture<>();
        ch.post(new ReadBatch(1).add(d.address(), d.rkey(), BLOCK, sink, 0, 0), (id, st, n) -> done.complete(st));
        return done.get(20, TimeUnit.SECONDS);
    }

    @Test
    @Timeout(60)
    void shouldRefuseQueuePairsPastTheirAddressShareAndTheNodeCapWhileAnotherAddressIsServed() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        RdmaShuffleConf conf = EmulatedPeers.conf(Map.of("spark.shuffle.rdma.maxConnections", "5",
                "spark.shuffle.rdma.maxConnectionsPerAddress", "3"));
        List<QueuePair> held = new ArrayList<>();
        try (VerbsNode server = EmulatedPeers.node(device, conf, "127.0.0.1", null);
             VerbsNode greedy = EmulatedPeers.node(device, conf, "127.0.0.2", null);
             VerbsNode other = EmulatedPeers.node(device, conf, "127.0.0.3", null);
             VerbsNode honest = EmulatedPeers.node(device, conf, "127.0.0.4", null);
             MemoryRegion region = server.register(EmulatedPeers.pattern(0, 1), RegionAccess.REMOTE_READ);
             MemoryRegion sink = honest.register(ByteBuffer.allocateDirect(BLOCK), RegionAccess.READ_SINK)) {
            for (int i = 0; i < 3; i++) {
                held.add(bareQueuePair(greedy, server));
            }
            IOException e = assertThrows(IOException.class, () -> held.add(bareQueuePair(greedy, server)),
                    "a fourth queue pair from one address");
            assertTrue(e.getMessage().contains("rdma_cm connect"), e.getMessage());

            RdmaChannel ch = honest.connect(server.localAddress()); // another address still gets its share
            assertEquals(ReadStatus.SUCCESS, readOnce(ch, region.descriptor(), sink));

            held.add(bareQueuePair(other, server)); // the fifth of the node
            assertThrows(IOException.class, () -> held.add(bareQueuePair(other, server)), "past maxConnections");
            assertEquals(2, server.stats().connectionsRefused(), "refusals counted in the node's stats");

            held.remove(0).closeQuietly(); // a queue pair that goes away stops costing a slot at once
            held.add(bareQueuePair(other, server));
        } finally {
            for (QueuePair q : held) {
                q.closeQuietly();
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldReapAQueuePairWhosePeerWentSilentWhileLiveChannelsKeepTheirs() throws Exception {
        EmulatedVerbs device = new EmulatedVerbs();
        // 4 s: keep-alives go every third of it, so a pause of a second on a loaded machine reaps no live queue pair.
        RdmaShuffleConf conf = EmulatedPeers.conf(Map.of("spark.shuffle.rdma.idleTimeout", "4s"));
        try (VerbsNode server = EmulatedPeers.node(device, conf, "127.0.0.1", null);
             VerbsNode silent = EmulatedPeers.node(device, conf, "127.0.0.2", null);
             VerbsNode live = EmulatedPeers.node(device, conf, "127.0.0.3", null);
             MemoryRegion region = server.register(EmulatedPeers.pattern(0, 1), RegionAccess.REMOTE_READ);
             MemoryRegion sink = live.register(ByteBuffer.allocateDirect(BLOCK), RegionAccess.READ_SINK)) {
            // A queue pair whose peer says nothing more (its host lost power: no disconnect, no keep-alive).
            QueuePair lost = bareQueuePair(silent, server);
            RdmaChannel ch = live.connect(server.localAddress());
            assertEquals(ReadStatus.SUCCESS, readOnce(ch, region.descriptor(), sink));
            EmulatedVerbs.Device listener = EmulatedVerbs.listening(server.rdmaPort());
            assertEquals(2, listener.acceptedQueuePairs());
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (listener.acceptedQueuePairs() > 1 && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertEquals(1, listener.acceptedQueuePairs(), "the silent peer's queue pair is closed after idleTimeout");
            assertEquals(1, server.queuePairsReaped());
            Thread.sleep(5_000); // past the idle timeout again: the live channel's keep-alives keep its queue pair
            assertEquals(1, listener.acceptedQueuePairs());
            assertEquals(ReadStatus.SUCCESS, readOnce(ch, region.descriptor(), sink));
            assertEquals(0, live.stats().reconnects(), "the live channel's queue pair was never replaced");
            lost.closeQuietly();
        }
    }
}
