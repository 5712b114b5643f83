package org.rdmashuffle.transport.tcp;

import java.io.IOException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.rdmashuffle.transport.ReadStatus;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The node's completion thread: drives every channel the node opened (sends queued requests, reads
 * replies into destinations, runs completions, enforces request timeouts, sends keep-alives). It
 * never waits on anything but its selector: anything thrown for one channel fails that channel
 * only; if the loop itself cannot go on, the node is reported failed and every channel fails.
 */
final class TcpRequester implements Runnable {
    private static final Logger LOG = LoggerFactory.getLogger(TcpRequester.class);
    private static final long TIMEOUT_CHECK_NANOS = 50_000_000L;

    private final Selector selector;
    private final List<TcpChannel> channels = new CopyOnWriteArrayList<>();
    private final java.util.function.Consumer<SelectionKey> onKey = this::service;
    private final TcpNode node;
    private volatile boolean running = true;

    TcpRequester(TcpNode node) throws IOException {
        this.node = node;
        this.selector = Selector.open();
    }

    private void service(SelectionKey k) {
        TcpChannel c = (TcpChannel) k.attachment();
        if (!k.isValid()) {
            return;
        }
        try {
            if (k.isReadable()) {
                c.onReadable();
            }
            if (k.isValid() && k.isWritable()) {
                c.flushWrites();
            }
        } catch (TcpChannel.ProtocolException e) {
            c.fail(ReadStatus.PROTOCOL_ERROR, e.getMessage());
        } catch (TcpChannel.IdleClosed e) {
            c.fail(ReadStatus.IDLE_CLOSED, e.getMessage());
        } catch (Throwable t) {
            c.fail(ReadStatus.CONNECTION_LOST, t.toString());
        }
    }

    void add(TcpChannel c) throws IOException {
        c.socket().configureBlocking(false);
        channels.add(c);
        c.key = c.socket().register(selector, SelectionKey.OP_READ, c);
        selector.wakeup();
    }

    void remove(TcpChannel c) {
        channels.remove(c);
    }

    List<TcpChannel> channels() {
        return channels;
    }

    void wakeup() {
        selector.wakeup();
    }

    void stop() {
        running = false;
        selector.wakeup();
    }

    @Override
    public void run() {
        long lastCheck = System.nanoTime();
        try {
            while (running) {
                selector.select(onKey, 50);
                // Indexed loops: no iterator per round (the loop runs once per wakeup).
                for (int i = 0; i < channels.size(); i++) {
                    TcpChannel c = channels.get(i);
                    if (c.closeRequested()) {
                        c.fail(ReadStatus.CHANNEL_CLOSED, "closed locally");
                    } else if (c.wantsFlush) {
                        c.wantsFlush = false;
                        try {
                            c.flushWrites();
                        } catch (Throwable t) {
                            c.fail(ReadStatus.CONNECTION_LOST, t.toString());
                        }
                    }
                }
                long now = System.nanoTime();
                if (now - lastCheck > TIMEOUT_CHECK_NANOS) {
                    lastCheck = now;
                    for (int i = 0; i < channels.size(); i++) {
                        channels.get(i).onTick(now);
                    }
                }
            }
        } catch (Throwable t) {
            LOG.error("tcp requester thread cannot go on: every channel of this node fails and no new one opens", t);
            node.requesterFailed(t);
        } finally {
            for (TcpChannel c : channels) {
                try {
                    c.fail(ReadStatus.CHANNEL_CLOSED, "node closed");
                } catch (Throwable t) {
                    LOG.debug("failing a channel", t);
                }
            }
            try {
                selector.close();
            } catch (IOException e) {
                LOG.debug("closing selector", e);
            }
        }
    }
}
