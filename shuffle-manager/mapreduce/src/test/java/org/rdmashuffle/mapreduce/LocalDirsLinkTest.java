package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A map output is found only where every component of its path below a NodeManager local dir is a directory (not a
 * link to one): a task that links its attempt's directory elsewhere cannot make the service serve what is there.
 */
class LocalDirsLinkTest {
    private static final String APP = LocalDirs.appBase("alice", "application_1700000000000_0001");
    private static final String OUTPUT = "output/attempt_1700000000000_0001_m_000000_0/file.out";

    @TempDir
    Path local;
    @TempDir
    Path elsewhere;

    private LocalDirs dirs() {
        Configuration c = new Configuration(false);
        c.set(MapReduceRdmaConf.NM_LOCAL_DIRS, local.toString());
        return new LocalDirs(null, c);
    }

    private static void write(Path file) throws Exception {
        Files.createDirectories(file.getParent());
        Files.writeString(file, "map output");
    }

    @Test
    void shouldFindTheOutputWhenEveryComponentIsADirectory() throws Exception {
        write(local.resolve(APP).resolve(OUTPUT));
        assertEquals(local.resolve(APP).resolve(OUTPUT).toFile(), dirs().find(APP + "/" + OUTPUT));
    }

    @Test
    void shouldNotFindTheOutputWhenADirectoryInTheMiddleOfItsPathIsALink() throws Exception {
        write(elsewhere.resolve(OUTPUT));
        Path app = local.resolve(APP);
        Files.createDirectories(app.getParent());
        Files.createSymbolicLink(app, elsewhere); // appcache/<appId> -> a directory outside the local dir
        File found = dirs().find(APP + "/" + OUTPUT);
        assertNull(found, "found through a linked directory: " + found);
    }

    @Test
    void shouldNotFindTheOutputWhenTheAttemptDirectoryIsALink() throws Exception {
        write(elsewhere.resolve("file.out"));
        Path attempt = local.resolve(APP).resolve(OUTPUT).getParent();
        Files.createDirectories(attempt.getParent());
        Files.createSymbolicLink(attempt, elsewhere);
        assertNull(dirs().find(APP + "/" + OUTPUT));
    }
}
