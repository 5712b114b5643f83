package org.rdmashuffle.mapreduce.jobs;

import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.BytesWritable;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.Partitioner;
import org.apache.hadoop.mapreduce.Reducer;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.mapreduce.lib.input.FixedLengthInputFormat;
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat;

/**
 * Sorts {@link TeraRows} files into a total order: identity map and reduce, and a range partitioner over the keys'
 * first two bytes, so reducer {@code i}'s output holds only keys below reducer {@code i + 1}'s. Every row crosses the
 * shuffle. Map output compression, the shuffle consumer plugin and the like come from the {@code Configuration}
 * passed in ({@code mapreduce.map.output.compress}, {@code mapreduce.map.output.compress.codec}, ...).
 */
public final class TeraSort {
    private TeraSort() {
    }

    public static JobResult run(Configuration conf, Path input, Path output, int reduces)
            throws IOException, InterruptedException {
        Job job = Job.getInstance(new Configuration(conf), "TeraSort into " + reduces + " reduces");
        job.setJarByClass(TeraSort.class);
        RowFiles.configureInput(job.getConfiguration());
        job.setInputFormatClass(FixedLengthInputFormat.class);
        FileInputFormat.setInputPaths(job, input);
        job.setMapperClass(RowFiles.SplitRowMapper.class);
        job.setPartitionerClass(KeyPrefixPartitioner.class);
        job.setReducerClass(Reducer.class);
        job.setNumReduceTasks(reduces);
        job.setMapOutputKeyClass(BytesWritable.class);
        job.setMapOutputValueClass(BytesWritable.class);
        job.setOutputKeyClass(BytesWritable.class);
        job.setOutputValueClass(BytesWritable.class);
        job.setOutputFormatClass(RowFiles.Output.class);
        FileOutputFormat.setOutputPath(job, output);
        return JobResult.run(job);
    }

    /**
     * Cuts the 16-bit space of the keys' first two bytes (unsigned) into equal ranges, one per reducer, in key
     * order. {@link TeraRows} keys are uniform, so the reducers get even shares.
     */
    public static final class KeyPrefixPartitioner extends Partitioner<BytesWritable, BytesWritable> {
        @Override
        public int getPartition(BytesWritable key, BytesWritable value, int partitions) {
            byte[] bytes = key.getBytes();
            int prefix = ((bytes[0] & 0xFF) << 8) | (bytes[1] & 0xFF);
            return (int) (((long) prefix * partitions) >>> 16);
        }
    }
}
