package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.SecureDirectoryStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The opener of map output files, on its own. */
class OutputFileOpenerTest {
    @TempDir
    Path dir;

    @Test
    void shouldSayTheServiceIsStoppingWhenOpeningAfterClose() throws Exception {
        Files.writeString(dir.resolve("file.out"), "data");
        OutputFileOpener opener = new OutputFileOpener(1000, shown -> { }, "closed");
        opener.close();
        try (DirectoryStream<Path> at = Files.newDirectoryStream(dir)) {
            assumeTrue(at instanceof SecureDirectoryStream, "this JVM has no SecureDirectoryStream (not Linux)");
            OutputFileOpener.NotOpenedInTime e = assertThrows(OutputFileOpener.NotOpenedInTime.class,
                    () -> opener.open((SecureDirectoryStream<Path>) at, Path.of("file.out"), "file.out", "job_1"));
            assertTrue(e.getMessage().contains("the service is stopping"), e.getMessage());
        }
    }
}
