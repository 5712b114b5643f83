package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapState;
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
}
