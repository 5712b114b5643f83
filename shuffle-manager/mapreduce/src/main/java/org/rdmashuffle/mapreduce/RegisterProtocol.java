package org.rdmashuffle.mapreduce;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Located;
import org.rdmashuffle.shuffle.core.format.ShuffleOutputTable;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * The one control message between a reducer and a NodeManager's {@link RdmaShuffleHandler}, carried by
 * {@link org.rdmashuffle.transport.RdmaChannel#call} on a connection authenticated for the reducer's job: "these
 * committed map attempts of my job, my partition". The service registers each attempt's {@code file.out} (if not
 * yet) in the job's output table and answers with the table's descriptor and, per map, what it holds and the
 * partition's raw (decompressed) and on-disk lengths from {@code file.out.index}.
 *
 * <p><b>Version 1</b> (reducers before 0.2): the data is then READ one-sidedly, slot, metadata and bytes: three
 * dependent round trips per map. <b>Version 2</b> ({@link #LOCATED_VERSION}): a registered attempt is answered
 * {@link #LOCATED} with where its partition lies — the descriptors of the regions of {@code file.out} that hold it,
 * the offset in the first and the on-disk length — so the reducer READs the bytes at once: one round trip per map.
 * A service answers each request in the version it was asked in, so an old reducer gets version-1 replies from a
 * new service. A service older than version 2 refuses a version-2 request as {@link #BAD_REQUEST} with a reason
 * starting {@code "REGISTER version "} ({@link #versionRefused}); the reducer then asks that NodeManager in version
 * 1 from then on (one round trip more, once) and READs slot, metadata and bytes as before.
 *
 * <p>Request: {@code type u8 = 1, version u8 (1 or 2), numMaps i32, numReduces i32, reduce i32, count i32}, then
 * {@code count} times {@code mapTaskIndex i32, attempt i32}. Reply: {@code status u8}; with {@link #OK} the table's
 * {@link RegionDescriptor} and {@code count i32}, then {@code count} times
 * {@code state u8, rawLength i64, partLength i64} in request order, in version 2 followed for a {@link #LOCATED}
 * state by {@code offset i64, length i64, regionBytes i64, regions i32} and that many region descriptors (see
 * {@link Located}; {@code length} equals {@code partLength}); otherwise a reason ({@code u16} length, UTF-8). A
 * version-2 reply stays within the service's {@code maxControlMessageSize}: past it, a registered attempt is
 * answered {@link #PUBLISHED} (READ through the table, as in version 1).
 *
 * <p><b>A location names one attempt's bytes or none.</b> The service gives a location only for the attempt the
 * reducer named, of the asking job (its connection's realm), and only while the job's output table holds exactly that
 * attempt registered ({@code MapOutputServer.dataRegions}, read under the table's lock); the location names the regions
 * of that attempt's {@code file.out}, registered for the job's realm. When a rerun replaces the attempt in the table,
 * the table deregisters the replaced attempt's regions before it publishes the new one
 * ({@code RegisteredOutputTable.publish}), and the transport never hands a deregistered rkey to another region (tcp:
 * keys do not repeat in a node's life), so a READ with a replaced attempt's location fails with
 * {@code UNKNOWN_KEY}: the core makes that an unregistered block, and the reducer fetches the map over HTTP, which
 * serves the attempt it names by path (or fails the fetch if it is gone). A reducer naming the replaced attempt after
 * the replacement gets {@link #VIA_HTTP} and no location. So no reducer READs one attempt's bytes as another's; the
 * same holds when the job stops (its table and outputs are deregistered). In version 1 the slot's and metadata's
 * attempt number give the same guarantee.
 *
 * <p><b>What a reducer believes.</b> A location is checked before any READ ({@link Located}: regions of the
 * lengths it states, the bytes inside them, no region more) and its length against the reply's {@code partLength};
 * a reply that does not hold is refused as a whole (that NodeManager's outputs go over HTTP). The service's
 * transport checks every READ against its region and the job's realm.
 */
final class RegisterProtocol {
    static final byte REGISTER = 1;
    /** The first version: states and lengths, the bytes READ through the output table. */
    static final byte VERSION = 1;
    /** Registered attempts answered with where their partition lies ({@link #LOCATED}). */
    static final byte LOCATED_VERSION = 2;
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
    /** (Version 2) The attempt's output is registered; its partition lies where the reply says: READ it at once. */
    static final byte LOCATED = 3;
    /** A location's fields before its region descriptors, in bytes. */
    private static final int LOCATION_HEAD_BYTES = 28;

    private static final int MAX_REASON_BYTES = 1024;

    private RegisterProtocol() {
    }

    /** One map attempt a reducer asks for: its task's index in the job and the attempt number. */
    record MapAttempt(int mapIndex, int attempt) {
    }

    record Request(int numMaps, int numReduces, int reduce, MapAttempt[] maps, byte version) {
        /** A version-1 request. */
        Request(int numMaps, int numReduces, int reduce, MapAttempt[] maps) {
            this(numMaps, numReduces, reduce, maps, VERSION);
        }
    }

    /** The answer for one map attempt; {@code location} with {@link #LOCATED} only. */
    record MapState(byte state, long rawLength, long partLength, Located location) {
        static final MapState GONE = new MapState(MISSING, 0, 0);
        static final MapState HTTP = new MapState(VIA_HTTP, 0, 0);

        MapState(byte state, long rawLength, long partLength) {
            this(state, rawLength, partLength, null);
        }
    }

    /**
     * Where {@code length} bytes from {@code start} of a data file registered as {@code fileRegions} lie: the regions
     * holding them (every one but the last of the first's length) and the offset in the first.
     *
     * @throws IllegalArgumentException when the bytes are not inside the regions
     */
    static Located locate(RegionDescriptor[] fileRegions, long start, long length) {
        if (length == 0) {
            return new Located(new RegionDescriptor[0], 1, 0, 0);
        }
        if (fileRegions.length == 0 || start < 0 || length < 0) {
            throw new IllegalArgumentException("bytes [" + start + ", +" + length + ") of " + fileRegions.length
                    + " regions");
        }
        long size = fileRegions[0].length();
        long first = start / size;
        long last = (start + length - 1) / size;
        if (last >= fileRegions.length) {
            throw new IllegalArgumentException("bytes [" + start + ", +" + length + ") past " + fileRegions.length
                    + " regions of " + size);
        }
        return new Located(java.util.Arrays.copyOfRange(fileRegions, (int) first, (int) last + 1), size,
                start - first * size, length);
    }

    /**
     * The state of a registered attempt whose partition is {@code partLength} bytes from {@code start} of its data
     * file: {@link #LOCATED} in {@code regions} (the file's data regions while the table holds that attempt
     * registered), else — no regions (a version-1 request, or the table holds another attempt or none registered),
     * or bytes outside them — {@link #PUBLISHED}, which the reducer looks up in the table.
     */
    static MapState answer(long start, long rawLength, long partLength, RegionDescriptor[] regions) {
        if (regions != null) {
            try {
                return new MapState(LOCATED, rawLength, partLength, locate(regions, start, partLength));
            } catch (IllegalArgumentException e) {
                // the index and the registered file disagree: the table's own answer stands
            }
        }
        return new MapState(PUBLISHED, rawLength, partLength);
    }

    /** Whether {@code r} is a service's refusal of the request's version (an older service: ask in version 1). */
    static boolean versionRefused(Reply r) {
        return r.status() == BAD_REQUEST && r.reason() != null && r.reason().startsWith("REGISTER version ");
    }

    /** A reply: {@code table} and {@code maps} with {@link #OK}, else {@code reason}. */
    record Reply(byte status, RegionDescriptor table, MapState[] maps, String reason) {
    }

    static ByteBuffer encode(Request r) {
        ByteBuffer b = ByteBuffer.allocate(18 + 8 * r.maps().length);
        b.put(REGISTER).put(r.version()).putInt(r.numMaps()).putInt(r.numReduces()).putInt(r.reduce())
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
            if (version != VERSION && version != LOCATED_VERSION) {
                throw new IllegalArgumentException("REGISTER version " + version + ", this service speaks " + VERSION
                        + " and " + LOCATED_VERSION);
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
            return new Request(numMaps, numReduces, reduce, maps, version);
        } catch (BufferUnderflowException e) {
            throw new IllegalArgumentException("REGISTER request cut short", e);
        }
    }

    /** A version-1 OK: a {@link #LOCATED} state is said as {@link #PUBLISHED}, without its location. */
    static ByteBuffer encodeOk(RegionDescriptor table, MapState[] maps) {
        return encodeOk(table, maps, VERSION, Integer.MAX_VALUE);
    }

    /**
     * An OK in {@code version}; in version 2 with the locations of {@link #LOCATED} states while the reply stays
     * within {@code maxBytes} (past it, those are said as {@link #PUBLISHED}).
     */
    static ByteBuffer encodeOk(RegionDescriptor table, MapState[] maps, byte version, int maxBytes) {
        long size = 1 + RegionDescriptor.ENCODED_BYTES + 4 + 17L * maps.length;
        boolean[] located = new boolean[maps.length];
        for (int i = 0; i < maps.length; i++) {
            Located l = maps[i].location();
            if (version >= LOCATED_VERSION && maps[i].state() == LOCATED && l != null) {
                long more = LOCATION_HEAD_BYTES + (long) RegionDescriptor.ENCODED_BYTES * l.regions().length;
                if (size + more <= maxBytes) {
                    size += more;
                    located[i] = true;
                }
            }
        }
        ByteBuffer b = ByteBuffer.allocate(Math.toIntExact(size));
        b.put(OK);
        table.writeTo(b);
        b.putInt(maps.length);
        for (int i = 0; i < maps.length; i++) {
            MapState m = maps[i];
            byte state = m.state() == LOCATED && !located[i] ? PUBLISHED : m.state();
            b.put(state).putLong(m.rawLength()).putLong(m.partLength());
            if (located[i]) {
                Located l = m.location();
                RegionDescriptor[] regions = l.regions();
                b.putLong(l.offset()).putLong(l.length()).putLong(l.regionBytes()).putInt(regions.length);
                for (RegionDescriptor d : regions) {
                    d.writeTo(b);
                }
            }
        }
        return b.flip();
    }

    static ByteBuffer encodeRefusal(byte status, String reason) {
        byte[] text = reason.getBytes(StandardCharsets.UTF_8);
        int n = Math.min(text.length, MAX_REASON_BYTES);
        return ByteBuffer.allocate(3 + n).put(status).putShort((short) n).put(text, 0, n).flip();
    }

    /** Parses a version-1 reply ({@link #parseReply(ByteBuffer, int, byte)}). */
    static Reply parseReply(ByteBuffer b, int expectedMaps) {
        return parseReply(b, expectedMaps, VERSION);
    }

    /**
     * Parses a service's reply to a request of {@code expectedMaps} maps in {@code version}, checking what it claims:
     * states known to the version, lengths not negative, every location one that holds ({@link Located}) of the
     * state's {@code partLength}.
     *
     * @throws IllegalArgumentException for a reply that does not fit the request
     */
    static Reply parseReply(ByteBuffer b, int expectedMaps, byte version) {
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
                check(state == PUBLISHED || state == VIA_HTTP || state == MISSING
                        || state == LOCATED && version >= LOCATED_VERSION, "map state " + state);
                check(raw >= 0 && part >= 0, "lengths " + raw + "/" + part);
                maps[i] = new MapState(state, raw, part, state == LOCATED ? location(b, part) : null);
            }
            check(!b.hasRemaining(), b.remaining() + " bytes after the reply");
            return new Reply(OK, table, maps, null);
        } catch (BufferUnderflowException e) {
            throw new IllegalArgumentException("REGISTER reply cut short", e);
        }
    }

    /** A location of {@code partLength} bytes at {@code b}'s position, checked. */
    private static Located location(ByteBuffer b, long partLength) {
        long offset = b.getLong();
        long length = b.getLong();
        long regionBytes = b.getLong();
        int count = b.getInt();
        check(length == partLength, "a location of " + length + " bytes for a partition of " + partLength);
        check(count >= 0 && count <= ShuffleOutputTable.MAX_REGIONS
                && (long) count * RegionDescriptor.ENCODED_BYTES <= b.remaining(), "a location in " + count
                + " regions");
        RegionDescriptor[] regions = new RegionDescriptor[count];
        for (int r = 0; r < count; r++) {
            regions[r] = RegionDescriptor.readFrom(b);
        }
        return new Located(regions, regionBytes, offset, length); // refuses one that does not hold
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new IllegalArgumentException(what);
        }
    }
}
