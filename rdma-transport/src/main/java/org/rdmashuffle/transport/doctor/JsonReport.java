package org.rdmashuffle.transport.doctor;

/**
 * {@code doctor --json}: one JSON object on one line, {@code {"host", "provider", "checks": [{"name", "status",
 * "detail", "fix"}...], "summary": {"pass", "warn", "fail", "skip"}, "selfTest": {...} or null, "exitStatus"}}.
 */
final class JsonReport {
    private JsonReport() {
    }

    static String render(Report r) {
        JsonWriter w = new JsonWriter().beginObject()
                .field("host", r.host())
                .field("provider", r.provider())
                .name("checks").beginArray();
        for (Check c : r.checks()) {
            w.beginObject().field("name", c.name()).field("status", c.status().name()).field("detail", c.detail())
                    .field("fix", c.fix()).endObject();
        }
        w.endArray().name("summary").beginObject();
        for (Check.Status s : Check.Status.values()) {
            w.name(s.name().toLowerCase()).value(r.count(s));
        }
        w.endObject().name("selfTest");
        SelfTestResult t = r.selfTest();
        if (t == null) {
            w.value((String) null);
        } else {
            w.beginObject().field("peer", t.peer()).field("transport", t.transport())
                    .name("reads").value(t.reads()).name("sizeBytes").value(t.sizeBytes())
                    .name("bytesVerified").value(t.bytesVerified()).name("mbPerSecond").value(t.mbPerSecond())
                    .name("p50Ms").value(t.p50Ms()).name("p99Ms").value(t.p99Ms()).endObject();
        }
        return w.name("exitStatus").value(r.exitStatus()).endObject().toString();
    }
}
