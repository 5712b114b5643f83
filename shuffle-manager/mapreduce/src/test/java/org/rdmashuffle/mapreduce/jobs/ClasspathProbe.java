package org.rdmashuffle.mapreduce.jobs;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.security.CodeSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.io.NullWritable;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.Mapper;
import org.apache.hadoop.mapreduce.Reducer;
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat;
import org.apache.hadoop.mapreduce.lib.output.TextOutputFormat;

/**
 * Asks reduce tasks which classes they can load, through the class loader a reduce task loads its shuffle consumer
 * plugin with (its configuration's), without initialising them: each reducer writes, for each named class, where it
 * loaded it from or why it could not. One map of one row; nothing is written for it.
 */
public final class ClasspathProbe {
    public static final String CLASSES_PROP_NAME = "rdmashuffle.probe.classes";
    /** What a reducer writes for a class it could not load. */
    public static final String MISSING = "MISSING";

    private ClasspathProbe() {
    }

    /** The job's outcome and, per class, what each reducer found: a code-source location, or MISSING and why. */
    public record Result(JobResult job, Map<String, List<String>> foundByClass) {
    }

    public static Result run(Configuration conf, Path output, int reduces, List<String> classNames)
            throws IOException, InterruptedException {
        Job job = Job.getInstance(new Configuration(conf), "ClasspathProbe");
        job.setJarByClass(ClasspathProbe.class);
        job.getConfiguration().setStrings(CLASSES_PROP_NAME, classNames.toArray(new String[0]));
        RowRangeInputFormat.configure(job.getConfiguration(), 1, 1);
        job.setInputFormatClass(RowRangeInputFormat.class);
        job.setMapperClass(Mapper.class);
        job.setReducerClass(ProbeReducer.class);
        job.setNumReduceTasks(reduces);
        job.setMapOutputKeyClass(LongWritable.class);
        job.setMapOutputValueClass(NullWritable.class);
        job.setOutputKeyClass(Text.class);
        job.setOutputValueClass(Text.class);
        job.setOutputFormatClass(TextOutputFormat.class);
        FileOutputFormat.setOutputPath(job, output);
        JobResult result = JobResult.run(job);

        Map<String, List<String>> found = new TreeMap<>();
        if (result.succeeded()) {
            FileSystem fs = output.getFileSystem(conf);
            for (FileStatus file : fs.listStatus(output, p -> p.getName().startsWith("part-"))) {
                try (BufferedReader in = new BufferedReader(new InputStreamReader(fs.open(file.getPath()),
                        StandardCharsets.UTF_8))) {
                    for (String line = in.readLine(); line != null; line = in.readLine()) {
                        int tab = line.indexOf('\t');
                        found.computeIfAbsent(line.substring(0, tab), k -> new ArrayList<>())
                                .add(line.substring(tab + 1));
                    }
                }
            }
        }
        return new Result(result, found);
    }

    /** Loads each named class in {@code setup}, before any input, as ReduceTask loads its plugin. */
    public static final class ProbeReducer extends Reducer<LongWritable, NullWritable, Text, Text> {
        @Override
        protected void setup(Context context) throws IOException, InterruptedException {
            Configuration conf = context.getConfiguration();
            for (String name : conf.getTrimmedStrings(CLASSES_PROP_NAME)) {
                String found;
                try {
                    Class<?> cls = Class.forName(name, false, conf.getClassLoader());
                    CodeSource source = cls.getProtectionDomain().getCodeSource();
                    found = source == null ? "(no code source)" : source.getLocation().toString();
                } catch (ClassNotFoundException | LinkageError e) {
                    found = MISSING + " " + e;
                }
                context.write(new Text(name), new Text(found));
            }
        }

        /** The maps' rows are only there to start the reducers: nothing to write for them. */
        @Override
        protected void reduce(LongWritable row, Iterable<NullWritable> nothing, Context context) {
        }
    }
}
