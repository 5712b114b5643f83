package org.rdmashuffle.mapreduce.jobs;

import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.BytesWritable;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.io.NullWritable;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.Mapper;
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat;

/**
 * Writes rows {@code [0, rows)} of data set {@code seed} ({@link TeraRows}) with {@code maps} maps in parallel,
 * each map a contiguous range of row numbers and one output file. A map-only job: no shuffle.
 */
public final class TeraGen {
    public static final String SEED_PROP_NAME = "rdmashuffle.teragen.seed";

    /** What the maps count while they write: rows, and the sum of the rows' {@link TeraRows#hash}es. */
    public enum Counter { ROWS, CHECKSUM }

    private TeraGen() {
    }

    /** The job's outcome and the count and checksum of what its maps wrote. */
    public record Result(JobResult job, TeraRows.Checksum written) {
    }

    /** Runs the job with {@code conf} (a {@code MapReduceCluster.jobConf()}, say) and waits for it. */
    public static Result run(Configuration conf, Path output, long rows, int maps, long seed)
            throws IOException, InterruptedException {
        Job job = Job.getInstance(new Configuration(conf), "TeraGen " + rows + " rows");
        job.setJarByClass(TeraGen.class);
        job.getConfiguration().setLong(SEED_PROP_NAME, seed);
        RowRangeInputFormat.configure(job.getConfiguration(), rows, maps);
        job.setInputFormatClass(RowRangeInputFormat.class);
        job.setMapperClass(GenerateMapper.class);
        job.setNumReduceTasks(0);
        job.setOutputKeyClass(BytesWritable.class);
        job.setOutputValueClass(BytesWritable.class);
        job.setOutputFormatClass(RowFiles.Output.class);
        FileOutputFormat.setOutputPath(job, output);
        JobResult result = JobResult.run(job);
        return new Result(result, new TeraRows.Checksum(result.counter(Counter.ROWS),
                result.counter(Counter.CHECKSUM)));
    }

    /** Turns each row number into its row. */
    public static final class GenerateMapper extends Mapper<LongWritable, NullWritable, BytesWritable, BytesWritable> {
        private final byte[] row = new byte[TeraRows.ROW_BYTES];
        private final BytesWritable key = new BytesWritable();
        private final BytesWritable value = new BytesWritable();
        private long seed;
        private long rows;
        private long checksum;

        @Override
        protected void setup(Context context) {
            seed = context.getConfiguration().getLong(SEED_PROP_NAME, 0);
        }

        @Override
        protected void map(LongWritable rowNumber, NullWritable nothing, Context context)
                throws IOException, InterruptedException {
            TeraRows.generate(seed, rowNumber.get(), row);
            key.set(row, 0, TeraRows.KEY_BYTES);
            value.set(row, TeraRows.KEY_BYTES, TeraRows.VALUE_BYTES);
            context.write(key, value);
            rows++;
            checksum += TeraRows.hash(row, 0, TeraRows.ROW_BYTES);
        }

        @Override
        protected void cleanup(Context context) {
            context.getCounter(Counter.ROWS).increment(rows);
            context.getCounter(Counter.CHECKSUM).increment(checksum);
        }
    }
}
