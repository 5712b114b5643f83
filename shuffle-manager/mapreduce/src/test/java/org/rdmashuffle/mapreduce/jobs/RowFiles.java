package org.rdmashuffle.mapreduce.jobs;

import java.io.IOException;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.BytesWritable;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.Mapper;
import org.apache.hadoop.mapreduce.RecordWriter;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.lib.input.FixedLengthInputFormat;
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat;

/**
 * The on-disk form of {@link TeraRows}: files of back-to-back {@value TeraRows#ROW_BYTES}-byte rows, no header,
 * no framing. Written by {@link Output}, read with Hadoop's {@link FixedLengthInputFormat}
 * ({@link #configureInput}), turned into (key, value) pairs by {@link SplitRowMapper}.
 */
public final class RowFiles {
    private RowFiles() {
    }

    /** Makes {@link FixedLengthInputFormat} cut its input into rows. */
    public static void configureInput(org.apache.hadoop.conf.Configuration conf) {
        FixedLengthInputFormat.setRecordLength(conf, TeraRows.ROW_BYTES);
    }

    /** Writes each (key, value) pair as the key's bytes followed by the value's. */
    public static final class Output extends FileOutputFormat<BytesWritable, BytesWritable> {
        @Override
        public RecordWriter<BytesWritable, BytesWritable> getRecordWriter(TaskAttemptContext context)
                throws IOException {
            Path file = getDefaultWorkFile(context, "");
            FSDataOutputStream out = file.getFileSystem(context.getConfiguration()).create(file, false);
            return new RecordWriter<>() {
                @Override
                public void write(BytesWritable key, BytesWritable value) throws IOException {
                    out.write(key.getBytes(), 0, key.getLength());
                    out.write(value.getBytes(), 0, value.getLength());
                }

                @Override
                public void close(TaskAttemptContext c) throws IOException {
                    out.close();
                }
            };
        }
    }

    /** Rows read by {@link FixedLengthInputFormat}, not split across maps: one map sees one whole file. */
    public static final class WholeFileInput extends FixedLengthInputFormat {
        @Override
        protected boolean isSplitable(JobContext context, Path file) {
            return false;
        }
    }

    /** Splits each {@value TeraRows#ROW_BYTES}-byte row into its key and value. */
    public static final class SplitRowMapper extends Mapper<LongWritable, BytesWritable, BytesWritable, BytesWritable> {
        private final BytesWritable key = new BytesWritable();
        private final BytesWritable value = new BytesWritable();

        @Override
        protected void map(LongWritable offset, BytesWritable row, Context context)
                throws IOException, InterruptedException {
            if (row.getLength() != TeraRows.ROW_BYTES) {
                throw new IOException("row of " + row.getLength() + " bytes at offset " + offset);
            }
            key.set(row.getBytes(), 0, TeraRows.KEY_BYTES);
            value.set(row.getBytes(), TeraRows.KEY_BYTES, TeraRows.VALUE_BYTES);
            context.write(key, value);
        }
    }
}
