package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The job secrets kept under the recovery path: read back whole, or skipped with a WARN when an entry is not whole. */
class JobSecretStoreTest {
    @TempDir
    Path dir;

    @Test
    void shouldSkipAnEmptyOrCutEntryWithAWarningAndReadBackTheWholeOnesWhenLoaded() throws Exception {
        JobSecretStore store = JobSecretStore.under(dir);
        ApplicationId kept = ServiceFixture.app(1);
        store.save(kept, "alice", "secret-of-1".getBytes(StandardCharsets.UTF_8));
        try (var files = Files.list(store.dir())) {
            assertEquals(List.of(kept.toString()), files.map(f -> f.getFileName().toString()).toList(),
                    "one entry, no temporary file left");
        }
        ApplicationId empty = ServiceFixture.app(2); // a crash between creating and writing
        Files.createFile(store.dir().resolve(empty.toString()));
        ApplicationId cut = ServiceFixture.app(3); // a crash within the write
        Files.writeString(store.dir().resolve(cut.toString()), "rdma-shuffle job secret v1\nbob\n");
        ApplicationId badSecret = ServiceFixture.app(4);
        Files.writeString(store.dir().resolve(badSecret.toString()), "rdma-shuffle job secret v1\nbob\n%%%\n");

        try (LoggedWarnings warnings = LoggedWarnings.of(JobSecretStore.class)) {
            List<JobSecretStore.Entry> loaded = store.load();
            assertEquals(1, loaded.size(), "only the whole entry is read back");
            assertEquals(kept, loaded.get(0).app());
            assertEquals("alice", loaded.get(0).user());
            assertArrayEquals("secret-of-1".getBytes(StandardCharsets.UTF_8), loaded.get(0).secret());
            for (ApplicationId skipped : List.of(empty, cut, badSecret)) {
                assertTrue(warnings.messages().stream().anyMatch(m -> m.contains(skipped.toString())
                        && m.contains("skipped")), () -> skipped + " not WARNed: " + warnings.messages());
            }
        }
    }
}
