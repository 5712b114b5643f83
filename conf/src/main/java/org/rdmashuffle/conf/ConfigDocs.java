package org.rdmashuffle.conf;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Renders {@code docs/configuration.md} from the declarations in {@link RdmaShuffleConf}. Run
 * {@code main} with the output path to regenerate it; a test fails when the file and the
 * declarations drift apart.
 */
public final class ConfigDocs {
    private ConfigDocs() {
    }

    /** The Markdown page for every declared key. */
    public static String render() {
        StringBuilder b = new StringBuilder();
        b.append("# Configuration\n\n");
        b.append("<!-- Generated from org.rdmashuffle.conf.RdmaShuffleConf; do not edit by hand. Regenerate with\n");
        b.append("     java -cp conf/target/classes org.rdmashuffle.conf.ConfigDocs docs/configuration.md -->\n\n");
        b.append("Every key is set like any Spark property (`--conf key=value` or `spark-defaults.conf`). ");
        b.append("Sizes take Spark's forms (`512k`, `48m`, `1g`; a bare number is bytes), times take Spark's ");
        b.append("(`500ms`, `30s`, `2min`; a bare number is milliseconds). All keys are checked when the shuffle ");
        b.append("manager starts: a bad value, or an unknown key under `spark.shuffle.rdma.`, stops it with a message ");
        b.append("naming the key, the value and what is accepted.\n\n");
        b.append("| key | type | default | accepted | meaning |\n");
        b.append("| --- | --- | --- | --- | --- |\n");
        for (ConfigKey<?> k : RdmaShuffleConf.keys()) {
            String dflt = k.defaultValue().isEmpty() ? "(empty)" : "`" + k.defaultValue() + "`";
            b.append("| `").append(k.name()).append("` | ").append(k.type()).append(" | ").append(dflt)
                    .append(" | ").append(escape(k.accepted())).append(" | ").append(escape(k.doc())).append(" |\n");
        }
        b.append("\nSpark's own keys honoured where they apply: `spark.reducer.maxSizeInFlight` (when ");
        b.append("`spark.shuffle.rdma.maxBytesInFlight` is unset), `spark.shuffle.io.maxRetries` and ");
        b.append("`spark.shuffle.io.retryWait` (when the connect retry keys are unset), and `spark.authenticate` ");
        b.append("with its secret for connection set-up.\n");
        return b.toString();
    }

    private static String escape(String s) {
        return s.replace("|", "\\|");
    }

    public static void main(String[] args) throws IOException {
        Path out = Path.of(args.length > 0 ? args[0] : "docs/configuration.md");
        Files.writeString(out, render(), StandardCharsets.UTF_8);
        System.out.println("wrote " + out.toAbsolutePath());
    }
}
