package org.rdmashuffle.transport.tcp;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import org.rdmashuffle.transport.ReadStatus;

/**
 * The receiving side of one {@link TcpChannel}: reads reply headers, checks each against the oldest
 * request sent (replies come in request order), and reads a READ's payload straight from the socket
 * into its destination buffer (the header of a long READ alone first, so the payload lands in place);
 * a control reply's body into a buffer of its own. Requester thread only; no allocation per READ.
 */
final class ReplyReader {
    /** READs at least this long have their header read alone, so the payload lands directly in place. */
    private static final int DIRECT_PAYLOAD_BYTES = 4096;
    private static final int RX_HEADER = 0;
    private static final int RX_PAYLOAD = 1;
    private static final int RX_CONTROL = 2;

    private final TcpChannel channel;
    private final SocketChannel socket;
    private final RequestRing ring;
    private final int maxControlBytes;
    private final ByteBuffer rx = ByteBuffer.allocateDirect(TcpChannel.IO_BUFFER_BYTES).flip();
    private int rxState = RX_HEADER;
    private ByteBuffer curDst;
    /**
     * Where the pending payload resumes and ends in {@code curDst}. Destination views are shared by
     * every channel of the node (all driven by its one requester thread), so a channel sets position and
     * limit again before each read instead of leaving them in the view for another channel to move.
     */
    private int curDstPosition;
    private int curDstLimit;
    private ByteBuffer curControl;

    ReplyReader(TcpChannel channel, SocketChannel socket, RequestRing ring, int maxControlBytes) {
        this.channel = channel;
        this.socket = socket;
        this.ring = ring;
        this.maxControlBytes = maxControlBytes;
    }

    /** Reads and completes every reply the socket has; true when it completed at least one request. */
    boolean read() throws IOException {
        boolean completed = false;
        for (;;) {
            if (rxState == RX_HEADER) {
                if (rx.remaining() < Wire.REPLY_HEADER_BYTES) {
                    if (!fillRx()) {
                        break;
                    }
                    continue;
                }
                completed |= onHeader();
            } else {
                ByteBuffer target;
                if (rxState == RX_PAYLOAD) {
                    target = curDst;
                    target.clear().limit(curDstLimit).position(curDstPosition);
                } else {
                    target = curControl;
                }
                int r = socket.read(target);
                if (rxState == RX_PAYLOAD) {
                    curDstPosition = target.position();
                }
                if (r < 0) {
                    throw new EOFException("peer closed the connection mid-reply");
                }
                if (target.hasRemaining()) {
                    if (r == 0) {
                        break;
                    }
                    continue;
                }
                if (rxState == RX_PAYLOAD) {
                    curDst = null;
                    channel.completeRead(ReadStatus.SUCCESS, ring.length[ring.slot(ring.head)]);
                } else {
                    curControl = null;
                    channel.completeControl(ReadStatus.SUCCESS, target.flip());
                }
                rxState = RX_HEADER;
                completed = true;
            }
        }
        return completed;
    }

    private boolean fillRx() throws IOException {
        rx.compact();
        long h = ring.head;
        int i = ring.slot(h);
        if (h < ring.sent && ring.kind[i] == RequestRing.KIND_READ && ring.length[i] >= DIRECT_PAYLOAD_BYTES) {
            rx.limit(Wire.REPLY_HEADER_BYTES);
        }
        int r = socket.read(rx);
        rx.flip();
        if (r < 0) {
            if (!rx.hasRemaining()) {
                // At a reply boundary: no byte of any outstanding request's reply came, so none was served.
                throw new TcpChannel.IdleClosed();
            }
            throw new EOFException("peer closed the connection mid-reply");
        }
        return r > 0;
    }

    /** Handles one reply header; true when it completed a request. */
    private boolean onHeader() throws IOException {
        byte op = rx.get();
        int status = rx.get() & 0xFF;
        rx.getShort();
        int id = rx.getInt();
        int len = rx.getInt();
        if (op == Wire.OP_ERROR) {
            channel.fail(status == 0 ? ReadStatus.PROTOCOL_ERROR : status, "peer rejected a request as "
                    + ReadStatus.describe(status));
            return false;
        }
        long h = ring.head;
        if (h >= ring.sent) {
            throw new TcpChannel.ProtocolException("reply with no request outstanding");
        }
        int i = ring.slot(h);
        if (id != (int) h) {
            throw new TcpChannel.ProtocolException("reply for request " + id + " while " + (int) h + " is due");
        }
        if (ring.kind[i] == RequestRing.KIND_READ) {
            if (op != Wire.OP_READ_REPLY) {
                throw new TcpChannel.ProtocolException("opcode " + op + " in reply to a READ");
            }
            if (status != ReadStatus.SUCCESS) {
                if (len != 0) {
                    throw new TcpChannel.ProtocolException("error reply with a payload");
                }
                channel.completeRead(status, 0);
                return true;
            }
            if (len != ring.length[i]) {
                throw new TcpChannel.ProtocolException("READ reply of " + len + " bytes for a READ of " + ring.length[i]);
            }
            ByteBuffer d = ring.dst[i];
            int off = ring.dstOffset[i];
            d.clear().position(off).limit(off + len);
            drainRxInto(d);
            if (d.hasRemaining()) {
                curDst = d;
                curDstPosition = d.position();
                curDstLimit = off + len;
                rxState = RX_PAYLOAD;
                return false;
            }
            channel.completeRead(ReadStatus.SUCCESS, len);
            return true;
        }
        if (op != Wire.OP_CONTROL_REPLY) {
            throw new TcpChannel.ProtocolException("opcode " + op + " in reply to a control message");
        }
        if (status != ReadStatus.SUCCESS) {
            channel.completeControl(status, null);
            return true;
        }
        if (len < 0 || len > maxControlBytes) {
            throw new TcpChannel.ProtocolException("control reply of " + len + " bytes");
        }
        ByteBuffer c = ByteBuffer.allocate(len);
        drainRxInto(c);
        if (c.hasRemaining()) {
            curControl = c;
            rxState = RX_CONTROL;
            return false;
        }
        channel.completeControl(ReadStatus.SUCCESS, c.flip());
        return true;
    }

    /** Moves reply bytes already buffered in {@code rx} into {@code target}, as many as it takes. */
    private void drainRxInto(ByteBuffer target) {
        int n = Math.min(rx.remaining(), target.remaining());
        if (n > 0) {
            int lim = rx.limit();
            rx.limit(rx.position() + n);
            target.put(rx);
            rx.limit(lim);
        }
    }
}
