package org.rdmashuffle.transport.doctor;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Arrays;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.MemoryRegion;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.RegionAccess;
import org.rdmashuffle.transport.TransportChoice;

/**
 * The serving side of the READ self-test: a node of the configured provider with one registered region of a
 * known content, whose descriptor it tells any peer that asks through a control message. It serves nothing else:
 * every other control message fails, and READs are the transport's, which answers only READs within a
 * registered region; a peer that lies or misbehaves gets errors, never other memory.
 */
final class SelfTestServer implements AutoCloseable {
    static final int REGION_BYTES = 64 << 20;

    private final RdmaNode node;
    private final TransportChoice choice;
    private final MemoryRegion region;

    private SelfTestServer(RdmaNode node, TransportChoice choice, MemoryRegion region) {
        this.node = node;
        this.choice = choice;
        this.region = region;
    }

    /** Opens the node on {@code host} and registers the region. */
    static SelfTestServer start(RdmaShuffleConf conf, String host) throws IOException {
        long seed = System.nanoTime() ^ 0x5DEECE66DL;
        ByteBuffer memory = ByteBuffer.allocateDirect(REGION_BYTES);
        SelfTestPattern.fill(memory, seed);
        Answer answer = new Answer();
        RdmaTransport.Opened opened = RdmaTransport.openChosen(conf, new NodeOptions(host, host, answer, null));
        try {
            MemoryRegion region = opened.node().register(memory, RegionAccess.REMOTE_READ);
            answer.reply = SelfTestPattern.reply(new SelfTestPattern.Served(region.descriptor(), seed));
            return new SelfTestServer(opened.node(), opened.choice(), region);
        } catch (IOException | RuntimeException e) {
            opened.node().close();
            throw e;
        }
    }

    NodeAddress address() {
        return node.localAddress();
    }

    TransportChoice choice() {
        return choice;
    }

    long readsServed() {
        return node.stats().readsServed();
    }

    @Override
    public void close() {
        region.close();
        node.close();
    }

    /** Answers {@link SelfTestPattern#REQUEST} with the region's descriptor and seed; fails every other message. */
    private static final class Answer implements ControlHandler {
        private volatile ByteBuffer reply;

        @Override
        public ByteBuffer onMessage(ByteBuffer request) {
            byte[] got = new byte[Math.min(request.remaining(), SelfTestPattern.REQUEST.length + 1)];
            request.get(got);
            ByteBuffer r = reply;
            if (r == null || !Arrays.equals(got, SelfTestPattern.REQUEST)) {
                throw new IllegalArgumentException("not a doctor region request");
            }
            return r.duplicate();
        }
    }
}
