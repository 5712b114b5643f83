package org.rdmashuffle.conf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

class ConfigDocsTest {

    @Test
    void shouldMatchCommittedConfigurationPageWhenDeclarationsChange() throws IOException {
        Path page = Path.of(System.getProperty("user.dir")).resolve("../docs/configuration.md").normalize();
        assertTrue(Files.exists(page), "missing " + page);
        String committed = Files.readString(page, StandardCharsets.UTF_8);
        assertEquals(ConfigDocs.render(), committed,
                "docs/configuration.md is out of date: regenerate it with "
                        + "java -cp conf/target/classes org.rdmashuffle.conf.ConfigDocs docs/configuration.md");
    }

    @Test
    void shouldListEveryDeclaredKeyWithDefaultAndAcceptedValues() {
        String page = ConfigDocs.render();
        for (ConfigKey<?> k : RdmaShuffleConf.keys()) {
            assertTrue(page.contains("| `" + k.name() + "` | " + k.type() + " | "), k.name());
            assertTrue(page.contains(k.accepted().replace("|", "\\|")), k.name());
        }
    }
}
