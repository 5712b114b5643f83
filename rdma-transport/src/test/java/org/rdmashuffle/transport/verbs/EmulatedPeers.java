package org.rdmashuffle.transport.verbs;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * Verbs nodes on one {@link EmulatedVerbs} adapter for tests: servers that each serve a region of
 * patterned blocks, and a client with a sink of as many blocks. Closes everything in reverse order.
 */
final class EmulatedPeers implements AutoCloseable {
    static final int BLOCK = 4096;

    final EmulatedVerbs device;
    final List<VerbsNode> servers = new ArrayList<>();
    final List<ByteBuffer> served = new ArrayList<>();
    final List<MemoryRegion> regions = new ArrayList<>();
    final VerbsNode client;
    final ByteBuffer sinkMemory;
    final MemoryRegion sink;
    private final List<AutoCloseable> others = new ArrayList<>();

    /** {@code settings} over the defaults below; {@code blocks} per server, one sink block per served block. */
    EmulatedPeers(EmulatedVerbs device, Map<String, String> settings, int serverCount, int blocks) throws Exception {
        this.device = device;
        RdmaShuffleConf conf = conf(settings);
        try {
            for (int s = 0; s < serverCount; s++) {
                VerbsNode n = node(device, conf, "127.0.0.1", null);
                servers.add(n);
                ByteBuffer b = pattern(s, blocks);
                served.add(b);
                regions.add(n.register(b, RegionAccess.REMOTE_READ));
            }
            client = node(device, conf, "127.0.0.1", null);
            sinkMemory = ByteBuffer.allocateDirect(BLOCK * blocks * serverCount);
            sink = client.register(sinkMemory, RegionAccess.READ_SINK);
        } catch (Exception e) {
            close();
            throw e;
        }
    }

    static RdmaShuffleConf conf(Map<String, String> settings) {
        Map<String, String> m = new HashMap<>(Map.of("spark.shuffle.rdma.provider", "verbs",
                "spark.shuffle.rdma.verbs.maxQpReadAtoms", "16", "spark.shuffle.rdma.maxReadsInFlightPerPeer", "16",
                "spark.shuffle.rdma.connectTimeout", "5s", "spark.shuffle.rdma.verbs.completionQueueSize", "256"));
        m.putAll(settings);
        return new RdmaShuffleConf(m);
    }

    static VerbsNode node(EmulatedVerbs device, RdmaShuffleConf conf, String host, byte[] secret) throws Exception {
        return new VerbsNode(conf, new NodeOptions(host, host, ControlHandler.NONE, secret), device.choice());
    }

    /** Registers {@code c} to be closed with these peers (first). */
    <T extends AutoCloseable> T closing(T c) {
        others.add(c);
        return c;
    }

    /** Block {@code b} of server {@code s}: a pattern no other block has. */
    static ByteBuffer pattern(int s, int blocks) {
        ByteBuffer b = ByteBuffer.allocateDirect(BLOCK * blocks);
        for (int i = 0; i < b.capacity(); i += 4) {
            b.putInt(i, (s * 7919 + i / BLOCK) * 0x01000193 ^ i * 0x9E3779B1 | 1);
        }
        return b;
    }

    RegionDescriptor region(int s) {
        return regions.get(s).descriptor();
    }

    /** Whether sink block {@code sinkBlock} holds block {@code block} of server {@code s}. */
    boolean holds(int sinkBlock, int s, int block) {
        return served.get(s).slice(block * BLOCK, BLOCK).equals(sinkMemory.slice(sinkBlock * BLOCK, BLOCK));
    }

    /** The client's emulated device. */
    EmulatedVerbs.Device clientDevice() {
        return EmulatedVerbs.listening(client.rdmaPort());
    }

    @Override
    public void close() throws Exception {
        for (int i = others.size() - 1; i >= 0; i--) {
            others.get(i).close();
        }
        if (sink != null) {
            sink.close();
        }
        if (client != null) {
            client.close();
        }
        for (MemoryRegion r : regions) {
            r.close();
        }
        for (VerbsNode n : servers) {
            n.close();
        }
    }
}
