package org.rdmashuffle.mapreduce;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The one control message between a reducer and a NodeManager's {@link RdmaShuffleHandler}, carried by
 * {@link org.rdmashuffle.transport.RdmaChannel#call} on a connection authenticated for the reducer's job: "these
 * committed map attempts of my job, my partition". The service registers each attempt's {@code file.out} (if not
 * yet) in the job's output table and answers with the table's descriptor and, per map, what it holds and the
 * partition's raw (decompressed) and on-disk lengths from {@code file.out.index}. The data is then READ
 * one-sidedly, slot, metadata and bytes, as every engine's reducer does.
 *
 * <p>Request: {@code type u8 = 1, version u8 = 1, numMaps i32, numReduces i32, reduce i32, count i32}, then
 * {@code count} times {@code mapTaskIndex i32, attempt i32}. Reply: {@code status u8}; with {@link #OK} the table's
 * {@link RegionDescriptor} and {@code count i32}, then {@code count} times
 * {@code state u8, rawLength i64, partLength i64} in request order; otherwise a reason ({@code u16} length, UTF-8).
 */
final class RegisterProtocol {
    static final byte REGISTER = 1;
    static final byte VERSION = 1;
    /** Maps named in one request at most (a reducer asks per host, in batches of this many). */
    static final int MAX_MAPS_PER_REQUEST = 1024;
    /** Maps of a job at most: an output table takes 32 bytes of direct memory per map. */
    static final int MAX_MAPS = 1 << 20;
    static final int MAX_REDUCES = 1 << 20;

    static final byte OK = 0;
    /** The service does not serve this job (fetch its outputs over HTTP). */
    static final byte UNKNOWN_JOB = 1;
    /** The request breaks the protocol; the reason says how. */
    static final byte BAD_REQUEST = 2;
    /**
     * The service has as many REGISTERs waiting as it takes: this request's maps are fetched over HTTP this time,
     * and the NodeManager is asked again on its next turn (a reducer older than this status takes it as a refusal
     * and fetches from that NodeManager over HTTP from then on).
     */
    static final byte BUSY = 3;
    /**
     * The service has no room for the job's output table (its bound on tables, a job's share of it, or the cap on
     * registered bytes; the reason names the key): this job's maps on that NodeManager are fetched over HTTP (a
     * reducer older than this status takes it as any refusal, with the same effect).
     */
    static final byte NO_ROOM = 4;

    /** The attempt's output is in the table (its slot says registered or left to HTTP). */
    static final byte PUBLISHED = 0;
    /** Not registered (a registration limit, an index that does not fit): fetch it over HTTP. */
    static final byte VIA_HTTP = 1;
    /** The attempt's output is not on this NodeManager: a fetch failure of that map. */
    static final byte MISSING = 2;

    private static final int MAX_REASON_BYTES = 1024;

    private RegisterProtocol() {
    }

    /** One map attempt a reducer asks for: its task's index in the job and the attempt number. */
    record MapAttempt(int mapIndex, int attempt) {
    }

    record Request(int numMaps, int numReduces, int reduce, MapAttempt[] maps) {
    }

    /** The answer for one map attempt. */
    record MapState(byte state, long rawLength, long partLength) {
        static final MapState GONE = new MapState(MISSING, 0, 0);
        static final MapState HTTP = new MapState(VIA_HTTP, 0, 0);
    }

    /** A reply: {@code table} and {@code maps} with {@link #OK}, else {@code reason}. */
    record Reply(byte status, RegionDescriptor table, MapState[] maps, String reason) {
    }

    static ByteBuffer encode(Request r) {
        ByteBuffer b = ByteBuffer.allocate(18 + 8 * r.maps().length);
        b.put(REGISTER).put(VERSION).putInt(r.numMaps()).putInt(r.numReduces()).putInt(r.reduce())
                .putInt(r.maps().length);
        for (MapAttempt m : r.maps()) {
            b.putInt(m.mapIndex()).putInt(m.attempt());
        }
        return b.flip();
    }

    /**
     * Parses and checks a request from a peer: every field bounded, every map index inside the job.
     *
     * @throws IllegalArgumentException saying what is wrong
     */
    static Request parseRequest(ByteBuffer b) {
        try {
            byte type = b.get();
            byte version = b.get();
            if (type != REGISTER) {
                throw new IllegalArgumentException("not a REGISTER request: type " + type);
            }
            if (version != VERSION) {
                throw new IllegalArgumentException("REGISTER version " + version + ", this service speaks " + VERSION);
            }
            int numMaps = b.getInt();
            int numReduces = b.getInt();
            int reduce = b.getInt();
            int count = b.getInt();
            check(numMaps >= 1 && numMaps <= MAX_MAPS, "numMaps " + numMaps + " outside 1.." + MAX_MAPS);
            check(numReduces >= 1 && numReduces <= MAX_REDUCES, "numReduces " + numReduces + " outside 1.." + MAX_REDUCES);
            check(reduce >= 0 && reduce < numReduces, "reduce " + reduce + " of " + numReduces);
            check(count >= 1 && count <= Math.min(numMaps, MAX_MAPS_PER_REQUEST), "count " + count + " outside 1.."
                    + Math.min(numMaps, MAX_MAPS_PER_REQUEST));
            check(b.remaining() == 8L * count, b.remaining() + " bytes for " + count + " maps");
            MapAttempt[] maps = new MapAttempt[count];
            for (int i = 0; i < count; i++) {
                int index = b.getInt();
                int attempt = b.getInt();
                check(index >= 0 && index < numMaps, "map index " + index + " of " + numMaps);
                check(attempt >= 0, "attempt " + attempt);
                maps[i] = new MapAttempt(index, attempt);
            }
            return new Request(numMaps, numReduces, reduce, maps);
        } catch (BufferUnderflowException e) {
            throw new IllegalArgumentException("REGISTER request cut short", e);
        }
    }

    static ByteBuffer encodeOk(RegionDescriptor table, MapState[] maps) {
        ByteBuffer b = ByteBuffer.allocate(1 + RegionDescriptor.ENCODED_BYTES + 4 + 17 * maps.length);
        b.put(OK);
        table.writeTo(b);
        b.putInt(maps.length);
        for (MapState m : maps) {
            b.put(m.state()).putLong(m.rawLength()).putLong(m.partLength());
        }
        return b.flip();
    }

    static ByteBuffer encodeRefusal(byte status, String reason) {
        byte[] text = reason.getBytes(StandardCharsets.UTF_8);
        int n = Math.min(text.length, MAX_REASON_BYTES);
        return ByteBuffer.allocate(3 + n).put(status).putShort((short) n).put(text, 0, n).flip();
    }

    /**
     * Parses a service's reply to a request of {@code expectedMaps} maps, checking what it claims.
     *
     * @throws IllegalArgumentException for a reply that does not fit the request
     */
    static Reply parseReply(ByteBuffer b, int expectedMaps) {
        try {
            byte status = b.get();
            if (status != OK) {
                int n = Short.toUnsignedInt(b.getShort());
                check(n <= MAX_REASON_BYTES && n <= b.remaining(), "reason of " + n + " bytes");
                byte[] text = new byte[n];
                b.get(text);
                return new Reply(status, null, null, new String(text, StandardCharsets.UTF_8));
            }
            RegionDescriptor table = RegionDescriptor.readFrom(b);
            int count = b.getInt();
            check(count == expectedMaps, count + " map states for " + expectedMaps + " maps asked");
            MapState[] maps = new MapState[count];
            for (int i = 0; i < count; i++) {
                byte state = b.get();
                long raw = b.getLong();
                long part = b.getLong();
                check(state == PUBLISHED || state == VIA_HTTP || state == MISSING, "map state " + state);
                check(raw >= 0 && part >= 0, "lengths " + raw + "/" + part);
                maps[i] = new MapState(state, raw, part);
            }
            check(!b.hasRemaining(), b.remaining() + " bytes after the reply");
            return new Reply(OK, table, maps, null);
        } catch (BufferUnderflowException e) {
            throw new IllegalArgumentException("REGISTER reply cut short", e);
        }
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new IllegalArgumentException(what);
        }
    }
}
