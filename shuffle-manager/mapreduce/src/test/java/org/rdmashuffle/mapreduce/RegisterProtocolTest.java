package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapState;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Located;
import org.rdmashuffle.transport.RegionDescriptor;

class RegisterProtocolTest {
    @Test
    void shouldFitTheLargestRequestAndItsAnswerInTheDefaultControlMessageSize() {
        int limit = new RdmaShuffleConf(Map.of()).maxControlMessageSizeBytes();
        MapAttempt[] maps = new MapAttempt[RegisterProtocol.MAX_MAPS_PER_REQUEST];
        for (int i = 0; i < maps.length; i++) {
            maps[i] = new MapAttempt(i, 3);
        }
        ByteBuffer request = RegisterProtocol.encode(new RegisterProtocol.Request(maps.length, 7, 6, maps));
        assertTrue(request.remaining() <= limit, request.remaining() + " > " + limit);
        MapState[] states = new MapState[maps.length];
        Arrays.fill(states, new MapState(RegisterProtocol.PUBLISHED, Long.MAX_VALUE, Long.MAX_VALUE));
        ByteBuffer reply = RegisterProtocol.encodeOk(new RegionDescriptor(1L << 40, 1L << 20, 7), states);
        assertTrue(reply.remaining() <= limit, "an OK for every map: " + reply.remaining() + " > " + limit);
        RegisterProtocol.Reply parsed = RegisterProtocol.parseReply(reply, maps.length);
        assertEquals(RegisterProtocol.OK, parsed.status());
        assertEquals(maps.length, parsed.maps().length);
        assertEquals(maps.length, RegisterProtocol.parseRequest(request).maps().length);
    }

    private static final RegionDescriptor TABLE = new RegionDescriptor(1L << 40, 96, 7);

    private static RegionDescriptor region(long address, long length, int rkey) {
        return new RegionDescriptor(address, length, rkey);
    }

    /** A version-2 OK of one LOCATED map of {@code partLength} bytes at {@code location}, as a service sends it. */
    private static ByteBuffer locatedReply(long partLength, Located location) {
        return RegisterProtocol.encodeOk(TABLE, new MapState[] {new MapState(RegisterProtocol.LOCATED, 2 * partLength,
                partLength, location)}, RegisterProtocol.LOCATED_VERSION, Integer.MAX_VALUE);
    }

    /** {@code reply} with the long at {@code at} (from the start) replaced by {@code value}: a lying service. */
    private static ByteBuffer withLong(ByteBuffer reply, int at, long value) {
        ByteBuffer b = ByteBuffer.allocate(reply.remaining()).put(reply.duplicate()).flip();
        return b.putLong(at, value);
    }

    /** Where the first map's location starts in an OK: status, table, count, state and two lengths. */
    private static final int LOCATION_AT = 1 + RegionDescriptor.ENCODED_BYTES + 4 + 17;

    @Test
    void shouldCarryEachMapsPartitionLocationInAVersion2ReplyAndParseItBack() {
        RegionDescriptor[] file = {region(0x1000, 100, 11), region(0x2000, 100, 12), region(0x3000, 50, 13)};
        Located whole = RegisterProtocol.locate(file, 150, 60); // crosses from the second region into the third
        assertEquals(2, whole.regions().length);
        assertEquals(12, whole.regions()[0].rkey());
        assertEquals(50, whole.offset());
        assertEquals(100, whole.regionBytes());
        MapState[] states = {new MapState(RegisterProtocol.LOCATED, 120, 60, whole),
                new MapState(RegisterProtocol.VIA_HTTP, 0, 0), new MapState(RegisterProtocol.MISSING, 0, 0),
                new MapState(RegisterProtocol.PUBLISHED, 8, 4),
                new MapState(RegisterProtocol.LOCATED, 0, 0, RegisterProtocol.locate(file, 250, 0))};
        RegisterProtocol.Reply r = RegisterProtocol.parseReply(RegisterProtocol.encodeOk(TABLE, states,
                RegisterProtocol.LOCATED_VERSION, Integer.MAX_VALUE), states.length, RegisterProtocol.LOCATED_VERSION);
        assertEquals(TABLE, r.table());
        Located back = r.maps()[0].location();
        assertEquals(RegisterProtocol.LOCATED, r.maps()[0].state());
        assertArrayEquals(whole.regions(), back.regions());
        assertEquals(50, back.offset());
        assertEquals(60, back.length());
        assertEquals(100, back.regionBytes());
        assertEquals(RegisterProtocol.VIA_HTTP, r.maps()[1].state());
        assertEquals(RegisterProtocol.MISSING, r.maps()[2].state());
        assertEquals(RegisterProtocol.PUBLISHED, r.maps()[3].state());
        assertNull(r.maps()[3].location(), "PUBLISHED: READ through the table");
        assertEquals(0, r.maps()[4].location().regions().length, "an empty partition needs no region");
    }

    @Test
    void shouldAnswerAVersion1RequestInVersion1WhenAnOldReducerAsks() {
        ByteBuffer old = RegisterProtocol.encode(new RegisterProtocol.Request(4, 2, 1,
                new MapAttempt[] {new MapAttempt(3, 0)}));
        assertEquals(RegisterProtocol.VERSION, old.get(1), "an old reducer's request, byte for byte");
        RegisterProtocol.Request parsed = RegisterProtocol.parseRequest(old);
        assertEquals(RegisterProtocol.VERSION, parsed.version());
        RegionDescriptor[] file = {region(0x1000, 100, 11)};
        MapState located = RegisterProtocol.answer(10, 40, 20, file);
        assertEquals(RegisterProtocol.LOCATED, located.state());
        ByteBuffer reply = RegisterProtocol.encodeOk(TABLE, new MapState[] {located}, parsed.version(),
                Integer.MAX_VALUE);
        assertEquals(1 + RegionDescriptor.ENCODED_BYTES + 4 + 17, reply.remaining(), "no location in version 1");
        RegisterProtocol.Reply r = RegisterProtocol.parseReply(reply, 1);
        assertEquals(RegisterProtocol.PUBLISHED, r.maps()[0].state(), "an old reducer READs it through the table");
        assertEquals(20, r.maps()[0].partLength());
        // And a LOCATED state is no state of version 1: an old reducer would refuse it, so it is never sent there.
        ByteBuffer v2 = locatedReply(20, located.location());
        assertThrows(IllegalArgumentException.class, () -> RegisterProtocol.parseReply(v2, 1));
    }

    @Test
    void shouldTellAnOlderServicesRefusalOfVersion2FromOtherRefusals() {
        // What a service of the previous release answers a version-2 request (its parseRequest's words).
        assertTrue(RegisterProtocol.versionRefused(RegisterProtocol.parseReply(RegisterProtocol.encodeRefusal(
                RegisterProtocol.BAD_REQUEST, "REGISTER version 2, this service speaks 1"), 1)));
        // This service refuses a version it does not know in the same words (a reducer of a later release asks again).
        ByteBuffer v3 = RegisterProtocol.encode(new RegisterProtocol.Request(4, 2, 1,
                new MapAttempt[] {new MapAttempt(3, 0)}, (byte) 3));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RegisterProtocol.parseRequest(v3));
        assertTrue(RegisterProtocol.versionRefused(RegisterProtocol.parseReply(RegisterProtocol.encodeRefusal(
                RegisterProtocol.BAD_REQUEST, e.getMessage()), 1)), e.getMessage());
        assertFalse(RegisterProtocol.versionRefused(RegisterProtocol.parseReply(RegisterProtocol.encodeRefusal(
                RegisterProtocol.BAD_REQUEST, "map index 3 of 3"), 1)));
        assertFalse(RegisterProtocol.versionRefused(RegisterProtocol.parseReply(RegisterProtocol.encodeRefusal(
                RegisterProtocol.BUSY, "REGISTER version 2"), 1)), "only a BAD_REQUEST refuses a version");
    }

    @Test
    void shouldRefuseALocationWhoseLengthDisagreesWithThePartitionsLength() {
        Located at = RegisterProtocol.locate(new RegionDescriptor[] {region(0x1000, 100, 11)}, 10, 20);
        ByteBuffer honest = locatedReply(20, at);
        assertEquals(20, RegisterProtocol.parseReply(honest.duplicate(), 1, RegisterProtocol.LOCATED_VERSION).maps()[0]
                .location().length());
        ByteBuffer longer = withLong(honest, LOCATION_AT + 8, 30); // the location says 30 bytes, partLength 20
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RegisterProtocol.parseReply(longer, 1, RegisterProtocol.LOCATED_VERSION));
        assertTrue(e.getMessage().contains("a location of 30 bytes for a partition of 20"), e.getMessage());
        ByteBuffer shorterPart = withLong(honest, LOCATION_AT - 8, 19); // partLength 19, the location 20
        assertThrows(IllegalArgumentException.class,
                () -> RegisterProtocol.parseReply(shorterPart, 1, RegisterProtocol.LOCATED_VERSION));
    }

    @Test
    void shouldRefuseALocationOutsideItsRegions() {
        Located at = RegisterProtocol.locate(new RegionDescriptor[] {region(0x1000, 100, 11)}, 10, 20);
        ByteBuffer honest = locatedReply(20, at);
        // offset 90 + 20 bytes ends past the region's 100
        ByteBuffer past = withLong(honest, LOCATION_AT, 90);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RegisterProtocol.parseReply(past, 1, RegisterProtocol.LOCATED_VERSION));
        assertTrue(e.getMessage().contains("does not hold"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> RegisterProtocol.parseReply(withLong(honest, LOCATION_AT,
                -1), 1, RegisterProtocol.LOCATED_VERSION), "a negative offset");
        assertThrows(IllegalArgumentException.class, () -> RegisterProtocol.parseReply(withLong(honest, LOCATION_AT,
                1000), 1, RegisterProtocol.LOCATED_VERSION), "an offset past the first region");
        // the region descriptor's length: 15 bytes hold no 20 from offset 10
        int regionLengthAt = LOCATION_AT + 28 + 8;
        assertThrows(IllegalArgumentException.class, () -> RegisterProtocol.parseReply(withLong(honest,
                regionLengthAt, 15), 1, RegisterProtocol.LOCATED_VERSION));
        // regions that do not line up: a first region shorter than the others, or one more than the bytes need
        RegionDescriptor a = region(0x1000, 100, 1);
        RegionDescriptor b = region(0x2000, 100, 2);
        assertThrows(IllegalArgumentException.class, () -> new Located(new RegionDescriptor[] {region(0, 60, 1), b},
                100, 10, 120), "a first region of another length");
        assertThrows(IllegalArgumentException.class, () -> new Located(new RegionDescriptor[] {a, b}, 100, 10, 20),
                "a region the bytes do not need");
        assertThrows(IllegalArgumentException.class, () -> new Located(new RegionDescriptor[] {a}, 100, 0, 0),
                "an empty block needs no region");
        assertEquals(2, new Located(new RegionDescriptor[] {a, b}, 100, 90, 20).regions().length);
        // a count of regions the reply does not hold is refused before anything is allocated for them
        ByteBuffer many = ByteBuffer.allocate(honest.remaining()).put(honest.duplicate()).flip();
        many.putInt(LOCATION_AT + 24, Integer.MAX_VALUE);
        assertThrows(IllegalArgumentException.class,
                () -> RegisterProtocol.parseReply(many, 1, RegisterProtocol.LOCATED_VERSION));
    }

    @Test
    void shouldKeepAVersion2ReplyWithinTheControlMessageSizeByLeavingLocationsOut() {
        int limit = new RdmaShuffleConf(Map.of()).maxControlMessageSizeBytes();
        MapState[] states = new MapState[RegisterProtocol.MAX_MAPS_PER_REQUEST];
        RegionDescriptor[] file = {region(0x1000, 1 << 20, 11)};
        for (int i = 0; i < states.length; i++) {
            states[i] = RegisterProtocol.answer(0, 200, 100, file);
        }
        ByteBuffer reply = RegisterProtocol.encodeOk(TABLE, states, RegisterProtocol.LOCATED_VERSION, limit);
        assertTrue(reply.remaining() <= limit, reply.remaining() + " > " + limit);
        RegisterProtocol.Reply r = RegisterProtocol.parseReply(reply, states.length, RegisterProtocol.LOCATED_VERSION);
        long located = java.util.Arrays.stream(r.maps()).filter(m -> m.state() == RegisterProtocol.LOCATED).count();
        assertTrue(located > states.length / 2, located + " located");
        assertEquals(RegisterProtocol.PUBLISHED, r.maps()[states.length - 1].state(), "past the size: the table");
    }
}
