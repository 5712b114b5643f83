package org.rdmashuffle.mapreduce.jobs;

import java.io.DataInput;
import java.io.DataOutput;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.io.NullWritable;
import org.apache.hadoop.io.Writable;
import org.apache.hadoop.mapreduce.InputFormat;
import org.apache.hadoop.mapreduce.InputSplit;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.RecordReader;
import org.apache.hadoop.mapreduce.TaskAttemptContext;

/**
 * Input without files: row numbers {@code [0, rows)} cut into {@code splits} contiguous ranges, one map each.
 * A map sees each of its row numbers as a key.
 */
public final class RowRangeInputFormat extends InputFormat<LongWritable, NullWritable> {
    public static final String ROWS_PROP_NAME = "rdmashuffle.rowrange.rows";
    public static final String SPLITS_PROP_NAME = "rdmashuffle.rowrange.splits";

    public static void configure(Configuration conf, long rows, int splits) {
        if (rows < 0 || splits < 1) {
            throw new IllegalArgumentException("rows " + rows + " and splits " + splits);
        }
        conf.setLong(ROWS_PROP_NAME, rows);
        conf.setInt(SPLITS_PROP_NAME, splits);
    }

    @Override
    public List<InputSplit> getSplits(JobContext context) {
        long rows = context.getConfiguration().getLong(ROWS_PROP_NAME, -1);
        int splits = context.getConfiguration().getInt(SPLITS_PROP_NAME, -1);
        if (rows < 0 || splits < 1) {
            throw new IllegalStateException("RowRangeInputFormat.configure was not called");
        }
        List<InputSplit> result = new ArrayList<>(splits);
        for (int i = 0; i < splits; i++) {
            long first = rows * i / splits;
            long end = rows * (i + 1) / splits;
            result.add(new RowRange(first, end - first));
        }
        return result;
    }

    @Override
    public RecordReader<LongWritable, NullWritable> createRecordReader(InputSplit split, TaskAttemptContext context) {
        return new RecordReader<>() {
            private final LongWritable key = new LongWritable();
            private RowRange range;
            private long done;

            @Override
            public void initialize(InputSplit s, TaskAttemptContext c) {
                range = (RowRange) s;
            }

            @Override
            public boolean nextKeyValue() {
                if (done == range.rowCount) {
                    return false;
                }
                key.set(range.firstRow + done++);
                return true;
            }

            @Override
            public LongWritable getCurrentKey() {
                return key;
            }

            @Override
            public NullWritable getCurrentValue() {
                return NullWritable.get();
            }

            @Override
            public float getProgress() {
                return range.rowCount == 0 ? 1f : (float) done / range.rowCount;
            }

            @Override
            public void close() {
            }
        };
    }

    /** Rows {@code [firstRow, firstRow + rowCount)}. */
    public static final class RowRange extends InputSplit implements Writable {
        private long firstRow;
        private long rowCount;

        /** For Hadoop's deserialisation. */
        public RowRange() {
        }

        RowRange(long firstRow, long rowCount) {
            this.firstRow = firstRow;
            this.rowCount = rowCount;
        }

        @Override
        public long getLength() {
            return rowCount * TeraRows.ROW_BYTES;
        }

        @Override
        public String[] getLocations() {
            return new String[0];
        }

        @Override
        public void write(DataOutput out) throws IOException {
            out.writeLong(firstRow);
            out.writeLong(rowCount);
        }

        @Override
        public void readFields(DataInput in) throws IOException {
            firstRow = in.readLong();
            rowCount = in.readLong();
        }
    }
}
