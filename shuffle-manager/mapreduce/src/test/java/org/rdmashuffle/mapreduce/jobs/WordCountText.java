package org.rdmashuffle.mapreduce.jobs;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Deterministic text for {@link WordCount}: lines of 4 to 15 words separated by single spaces, drawn from a
 * vocabulary of made-up words with a skewed distribution (a few words are very common, most are rare), so a
 * combiner has much to merge and reducers still see many keys.
 */
public final class WordCountText {
    private static final String[] SYLLABLES = {
        "ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "du", "xo", "qua", "zen", "bel", "ori", "fu"
    };

    private WordCountText() {
    }

    /** The vocabulary: {@code size} distinct words of one to three syllables. */
    static List<String> vocabulary(int size) {
        List<String> words = new ArrayList<>(size);
        for (int i = 0; words.size() < size; i++) {
            StringBuilder word = new StringBuilder();
            int rest = i;
            do {
                word.append(SYLLABLES[rest % SYLLABLES.length]);
                rest /= SYLLABLES.length;
            } while (rest > 0);
            words.add(word.toString());
        }
        return words;
    }

    /**
     * Writes {@code files} files ({@code text-00000.txt}, ...) of {@code linesPerFile} lines each under {@code dir}.
     * File {@code f} depends only on ({@code seed}, {@code f}).
     */
    public static List<Path> write(Configuration conf, Path dir, int files, int linesPerFile, int vocabularySize,
            long seed) throws IOException {
        List<String> vocabulary = vocabulary(vocabularySize);
        FileSystem fs = dir.getFileSystem(conf);
        List<Path> paths = new ArrayList<>(files);
        for (int f = 0; f < files; f++) {
            Path path = new Path(dir, String.format("text-%05d.txt", f));
            SplittableRandom random = new SplittableRandom(seed * 1_000_003L + f);
            try (Writer out = new BufferedWriter(new OutputStreamWriter(fs.create(path, false),
                    StandardCharsets.UTF_8))) {
                for (int line = 0; line < linesPerFile; line++) {
                    int words = 4 + random.nextInt(12);
                    for (int w = 0; w < words; w++) {
                        double u = random.nextDouble();
                        if (w > 0) {
                            out.write(' ');
                        }
                        out.write(vocabulary.get((int) (u * u * u * vocabularySize)));
                    }
                    out.write('\n');
                }
            }
            paths.add(path);
        }
        return paths;
    }
}
