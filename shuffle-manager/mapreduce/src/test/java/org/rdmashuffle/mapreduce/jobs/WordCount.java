package org.rdmashuffle.mapreduce.jobs;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.StringTokenizer;
import java.util.TreeMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.Mapper;
import org.apache.hadoop.mapreduce.Reducer;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.mapreduce.lib.input.TextInputFormat;
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat;
import org.apache.hadoop.mapreduce.lib.output.TextOutputFormat;

/**
 * Counts words (runs of characters between whitespace) in text files: a map emits (word, 1), the same summing
 * reducer runs as combiner on the map side and as reducer, and the output is "word TAB count" lines.
 */
public final class WordCount {
    private WordCount() {
    }

    /** The job's outcome and the counts it wrote. */
    public record Result(JobResult job, Map<String, Long> counts) {
    }

    public static Result run(Configuration conf, Path input, Path output, int reduces)
            throws IOException, InterruptedException {
        Job job = Job.getInstance(new Configuration(conf), "WordCount into " + reduces + " reduces");
        job.setJarByClass(WordCount.class);
        job.setInputFormatClass(TextInputFormat.class);
        FileInputFormat.setInputPaths(job, input);
        job.setMapperClass(TokenizeMapper.class);
        job.setCombinerClass(SumReducer.class);
        job.setReducerClass(SumReducer.class);
        job.setNumReduceTasks(reduces);
        job.setMapOutputKeyClass(Text.class);
        job.setMapOutputValueClass(LongWritable.class);
        job.setOutputKeyClass(Text.class);
        job.setOutputValueClass(LongWritable.class);
        job.setOutputFormatClass(TextOutputFormat.class);
        FileOutputFormat.setOutputPath(job, output);
        JobResult result = JobResult.run(job);
        return new Result(result, result.succeeded() ? readCounts(conf, output) : Map.of());
    }

    /** Reads the "word TAB count" lines of every output file of {@code output}. */
    public static Map<String, Long> readCounts(Configuration conf, Path output) throws IOException {
        FileSystem fs = output.getFileSystem(conf);
        Map<String, Long> counts = new TreeMap<>();
        for (FileStatus file : fs.listStatus(output, p -> p.getName().startsWith("part-"))) {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(fs.open(file.getPath()),
                    StandardCharsets.UTF_8))) {
                for (String line = in.readLine(); line != null; line = in.readLine()) {
                    int tab = line.indexOf('\t');
                    Long previous = counts.put(line.substring(0, tab), Long.parseLong(line.substring(tab + 1)));
                    if (previous != null) {
                        throw new IOException("word '" + line.substring(0, tab) + "' written twice");
                    }
                }
            }
        }
        return counts;
    }

    /** Emits (word, 1) for every word of a line. */
    public static final class TokenizeMapper extends Mapper<LongWritable, Text, Text, LongWritable> {
        private static final LongWritable ONE = new LongWritable(1);
        private final Text word = new Text();

        @Override
        protected void map(LongWritable offset, Text line, Context context) throws IOException, InterruptedException {
            StringTokenizer words = new StringTokenizer(line.toString());
            while (words.hasMoreTokens()) {
                word.set(words.nextToken());
                context.write(word, ONE);
            }
        }
    }

    /** Sums the counts of a word; the combiner and the reducer. */
    public static final class SumReducer extends Reducer<Text, LongWritable, Text, LongWritable> {
        private final LongWritable total = new LongWritable();

        @Override
        protected void reduce(Text word, Iterable<LongWritable> counts, Context context)
                throws IOException, InterruptedException {
            long sum = 0;
            for (LongWritable count : counts) {
                sum += count.get();
            }
            total.set(sum);
            context.write(word, total);
        }
    }
}
