package org.rdmashuffle.mapreduce.jobs;

import java.io.BufferedReader;
import java.io.DataInput;
import java.io.DataOutput;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.BytesWritable;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.io.NullWritable;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.io.Writable;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.Mapper;
import org.apache.hadoop.mapreduce.Reducer;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.mapreduce.lib.input.FileSplit;
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat;
import org.apache.hadoop.mapreduce.lib.output.TextOutputFormat;

/**
 * Checks a {@link TeraSort} output: one map per file checks that the file's keys never decrease and summarises it
 * (rows, checksum, first and last key); a single reducer takes the summaries in file-name order, which is reducer
 * order, and checks that each non-empty file's last key lies below the next non-empty file's first key. It writes
 * one line per file and a summary line, which {@link #run} reads back as a {@link Report}.
 */
public final class TeraValidate {
    private static final HexFormat HEX = HexFormat.of();

    /** Rows read, rows out of order inside their file, and file boundaries whose key ranges overlap. */
    public enum Counter { ROWS, UNSORTED_ROWS, OVERLAPPING_BOUNDARIES }

    private TeraValidate() {
    }

    /**
     * What TeraValidate found: the files, their rows and checksum, rows out of order within a file, and consecutive
     * files whose key ranges overlap. {@code fileLines} holds one line per file, for messages.
     */
    public record Report(JobResult job, int files, TeraRows.Checksum checksum, long unsortedRows,
            long overlappingBoundaries, List<String> fileLines) {
        /** Every file sorted and the files in order. */
        public boolean sorted() {
            return unsortedRows == 0 && overlappingBoundaries == 0;
        }
    }

    public static Report run(Configuration conf, Path input, Path output) throws IOException, InterruptedException {
        Job job = Job.getInstance(new Configuration(conf), "TeraValidate");
        job.setJarByClass(TeraValidate.class);
        RowFiles.configureInput(job.getConfiguration());
        job.setInputFormatClass(RowFiles.WholeFileInput.class);
        FileInputFormat.setInputPaths(job, input);
        job.setMapperClass(SummariseFileMapper.class);
        job.setReducerClass(CheckOrderReducer.class);
        job.setNumReduceTasks(1);
        job.setMapOutputKeyClass(Text.class);
        job.setMapOutputValueClass(FileSummary.class);
        job.setOutputKeyClass(Text.class);
        job.setOutputValueClass(NullWritable.class);
        job.setOutputFormatClass(TextOutputFormat.class);
        FileOutputFormat.setOutputPath(job, output);
        JobResult result = JobResult.run(job);
        if (!result.succeeded()) {
            return new Report(result, 0, new TeraRows.Checksum(0, 0), 0, 0, List.of());
        }

        List<String> fileLines = new ArrayList<>();
        String summary = null;
        Path reportFile = new Path(output, "part-r-00000");
        FileSystem fs = reportFile.getFileSystem(conf);
        try (BufferedReader in = new BufferedReader(new InputStreamReader(fs.open(reportFile),
                StandardCharsets.UTF_8))) {
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                if (line.startsWith("file ")) {
                    fileLines.add(line);
                } else if (line.startsWith("summary ")) {
                    summary = line;
                }
            }
        }
        if (summary == null) {
            throw new IOException("no summary line in " + reportFile);
        }
        return new Report(result, (int) field(summary, "files"),
                new TeraRows.Checksum(field(summary, "rows"), Long.parseUnsignedLong(text(summary, "checksum"), 16)),
                field(summary, "unsorted"), field(summary, "overlaps"), List.copyOf(fileLines));
    }

    private static String text(String line, String name) {
        for (String part : line.split(" ")) {
            if (part.startsWith(name + "=")) {
                return part.substring(name.length() + 1);
            }
        }
        throw new IllegalArgumentException("no " + name + " in '" + line + "'");
    }

    private static long field(String line, String name) {
        return Long.parseLong(text(line, name));
    }

    /** One file's rows, checksum, out-of-order rows and first and last key. */
    public static final class FileSummary implements Writable {
        private long rows;
        private long checksum;
        private long unsortedRows;
        private byte[] firstKey = new byte[0];
        private byte[] lastKey = new byte[0];

        @Override
        public void write(DataOutput out) throws IOException {
            out.writeLong(rows);
            out.writeLong(checksum);
            out.writeLong(unsortedRows);
            writeBytes(out, firstKey);
            writeBytes(out, lastKey);
        }

        @Override
        public void readFields(DataInput in) throws IOException {
            rows = in.readLong();
            checksum = in.readLong();
            unsortedRows = in.readLong();
            firstKey = readBytes(in);
            lastKey = readBytes(in);
        }

        private static void writeBytes(DataOutput out, byte[] bytes) throws IOException {
            out.writeInt(bytes.length);
            out.write(bytes);
        }

        private static byte[] readBytes(DataInput in) throws IOException {
            byte[] bytes = new byte[in.readInt()];
            in.readFully(bytes);
            return bytes;
        }
    }

    /** Reads one whole file (its split is the file) and emits its summary under the file's name. */
    public static final class SummariseFileMapper extends Mapper<LongWritable, BytesWritable, Text, FileSummary> {
        private final FileSummary summary = new FileSummary();
        private final byte[] previousKey = new byte[TeraRows.KEY_BYTES];

        @Override
        protected void map(LongWritable offset, BytesWritable row, Context context) throws IOException {
            if (row.getLength() != TeraRows.ROW_BYTES) {
                throw new IOException("row of " + row.getLength() + " bytes at offset " + offset);
            }
            byte[] bytes = row.getBytes();
            if (summary.rows == 0) {
                summary.firstKey = Arrays.copyOf(bytes, TeraRows.KEY_BYTES);
            } else if (Arrays.compareUnsigned(previousKey, 0, TeraRows.KEY_BYTES, bytes, 0, TeraRows.KEY_BYTES) > 0) {
                summary.unsortedRows++;
            }
            System.arraycopy(bytes, 0, previousKey, 0, TeraRows.KEY_BYTES);
            summary.rows++;
            summary.checksum += TeraRows.hash(bytes, 0, TeraRows.ROW_BYTES);
        }

        @Override
        protected void cleanup(Context context) throws IOException, InterruptedException {
            if (summary.rows > 0) {
                summary.lastKey = previousKey.clone();
            }
            context.getCounter(Counter.ROWS).increment(summary.rows);
            context.getCounter(Counter.UNSORTED_ROWS).increment(summary.unsortedRows);
            String file = ((FileSplit) context.getInputSplit()).getPath().getName();
            context.write(new Text(file), summary);
        }
    }

    /** Sees the files' summaries in name order and checks that their key ranges follow one another. */
    public static final class CheckOrderReducer extends Reducer<Text, FileSummary, Text, NullWritable> {
        private int files;
        private long rows;
        private long checksum;
        private long unsortedRows;
        private long overlaps;
        private byte[] lastKeySoFar;

        @Override
        protected void reduce(Text file, Iterable<FileSummary> summaries, Context context)
                throws IOException, InterruptedException {
            for (FileSummary s : summaries) {
                files++;
                rows += s.rows;
                checksum += s.checksum;
                unsortedRows += s.unsortedRows;
                boolean overlapping = false;
                if (s.rows > 0) {
                    overlapping = lastKeySoFar != null && Arrays.compareUnsigned(lastKeySoFar, s.firstKey) >= 0;
                    lastKeySoFar = s.lastKey;
                }
                if (overlapping) {
                    overlaps++;
                    context.getCounter(Counter.OVERLAPPING_BOUNDARIES).increment(1);
                }
                context.write(new Text("file " + file + " rows=" + s.rows + " unsorted=" + s.unsortedRows
                        + " first=" + HEX.formatHex(s.firstKey) + " last=" + HEX.formatHex(s.lastKey)
                        + " checksum=" + Long.toHexString(s.checksum)
                        + (overlapping ? " OVERLAPS_PREVIOUS" : "")), NullWritable.get());
            }
        }

        @Override
        protected void cleanup(Context context) throws IOException, InterruptedException {
            context.write(new Text("summary files=" + files + " rows=" + rows + " checksum="
                    + Long.toHexString(checksum) + " unsorted=" + unsortedRows + " overlaps=" + overlaps),
                    NullWritable.get());
        }
    }
}
