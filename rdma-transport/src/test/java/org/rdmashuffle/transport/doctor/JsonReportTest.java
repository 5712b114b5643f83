package org.rdmashuffle.transport.doctor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import org.junit.jupiter.api.Test;

class JsonReportTest {
    @Test
    void shouldEscapeAndSeparateEverythingWhenAReportIsRendered() {
        Report r = new Report("h\"1", "verbs", List.of(
                Check.pass("java", "Java 25"),
                Check.of("memlock", Check.Status.FAIL, "a\\b\nc\td\u0001", "ulimit -l unlimited")),
                new SelfTestResult("tcp://10.0.0.1:7", "tcp (provider=tcp)", 2, 8, 16, 1.5, 0.25, Double.NaN));

        assertEquals("{\"host\":\"h\\\"1\",\"provider\":\"verbs\",\"checks\":["
                + "{\"name\":\"java\",\"status\":\"PASS\",\"detail\":\"Java 25\",\"fix\":\"\"},"
                + "{\"name\":\"memlock\",\"status\":\"FAIL\",\"detail\":\"a\\\\b\\nc\\td\\u0001\","
                + "\"fix\":\"ulimit -l unlimited\"}],"
                + "\"summary\":{\"pass\":1,\"warn\":0,\"fail\":1,\"skip\":0},"
                + "\"selfTest\":{\"peer\":\"tcp://10.0.0.1:7\",\"transport\":\"tcp (provider=tcp)\",\"reads\":2,"
                + "\"sizeBytes\":8,\"bytesVerified\":16,\"mbPerSecond\":1.5,\"p50Ms\":0.25,\"p99Ms\":null},"
                + "\"exitStatus\":1}", JsonReport.render(r));
    }

    @Test
    void shouldWriteNullSelfTestAndExitZeroWhenNothingFailed() {
        Report r = new Report("h", "auto", List.of(Check.of("rdma devices", Check.Status.WARN, "none", "load one")),
                null);

        assertEquals("{\"host\":\"h\",\"provider\":\"auto\",\"checks\":[{\"name\":\"rdma devices\",\"status\":\"WARN\","
                + "\"detail\":\"none\",\"fix\":\"load one\"}],\"summary\":{\"pass\":0,\"warn\":1,\"fail\":0,\"skip\":0},"
                + "\"selfTest\":null,\"exitStatus\":0}", JsonReport.render(r));
    }

    @Test
    void shouldNestArraysInArraysWhenValuesFollowEachOther() {
        String json = new JsonWriter().beginArray().beginArray().value(1).value(true).endArray().beginObject()
                .endObject().value("x").endArray().toString();
        assertEquals("[[1,true],{},\"x\"]", json);
        assertThrows(IllegalStateException.class, () -> new JsonWriter().endObject());
    }

    @Test
    void shouldPrintTheFixOnlyWhenTheCheckDidNotPass() {
        assertEquals("PASS  java  Java 25", TextReport.line(new Check("java", Check.Status.PASS, "Java 25", "ignored")));
        assertEquals("FAIL  memlock  8m -> fix: ulimit -l unlimited",
                TextReport.line(Check.of("memlock", Check.Status.FAIL, "8m", "ulimit -l unlimited")));
        assertEquals("SKIP  rdma_cm  provider=tcp", TextReport.line(Check.skip("rdma_cm", "provider=tcp")));
    }
}
