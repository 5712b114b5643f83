package org.rdmashuffle.shuffle;

import java.io.IOException;
import java.io.InputStream;
import java.util.List;
import java.util.function.Supplier;
import org.apache.spark.network.buffer.ManagedBuffer;
import org.apache.spark.shuffle.ShuffleBlockResolver;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Tuple2;
import scala.collection.Iterator;

/**
 * A reduce task's blocks written on this executor, read straight from disk through Spark's block resolver,
 * one open at a time (with batch fetch, each map output's run of them as one block, as Spark's reader reads
 * them), with Spark's local read metrics. On the task thread. A block that cannot be opened or decoded
 * blames this executor's map output ({@link FetchFailures#fetchFailed}), as Spark's reader does; one found
 * corrupt while its records are read is diagnosed first ({@link CorruptionDiagnosis}).
 */
final class LocalBlocks implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(LocalBlocks.class);

    /** What is opened as one block: a block, or a batch of one map output's blocks. */
    private final List<List<BlockOrigin>> units;
    private final ShuffleBlockResolver resolver;
    private final CorruptionDiagnosis diagnosis;
    private final BlockDecoder decoder;
    private final FetchFailures failures;
    private final ShuffleReadMetricsReporter metrics;
    private int next;
    /** The open block's stream, or null. */
    private InputStream stream;

    LocalBlocks(List<BlockOrigin> blocks, boolean batch, ShuffleBlockResolver resolver, CorruptionDiagnosis diagnosis,
                BlockDecoder decoder, FetchFailures failures, ShuffleReadMetricsReporter metrics) {
        this.units = BlockOrigin.units(blocks, batch);
        this.resolver = resolver;
        this.diagnosis = diagnosis;
        this.decoder = decoder;
        this.failures = failures;
        this.metrics = metrics;
    }

    boolean hasNext() {
        return next < units.size();
    }

    /** Whether a block is open (its records are being read). */
    boolean reading() {
        return stream != null;
    }

    /** Opens the next block; the caller closes the previous one first ({@link #closeStream}). */
    Iterator<Tuple2<Object, Object>> openNext() {
        List<BlockOrigin> unit = units.get(next++);
        BlockOrigin o = unit.get(0);
        org.apache.spark.storage.BlockId id = BlockOrigin.unitId(unit);
        InputStream decoded;
        try {
            ManagedBuffer data = SparkInterop.blockData(resolver, id);
            stream = data.createInputStream();
            metrics.incLocalBlocksFetched(1);
            metrics.incLocalBytesRead(data.size());
            decoded = decoder.decode(o, stream);
        } catch (IOException | RuntimeException e) {
            // as Spark's reader: a local block that cannot be opened or decoded fails the fetch at once
            throw failures.fetchFailed(o, new FetchFailure(null, "cannot read local block " + id + ": "
                    + e.getMessage(), e));
        }
        Supplier<String> why = unit.size() > 1
                ? () -> diagnosis.notDiagnosed(o.blockId(), id + " is a batch; checksums are kept per block")
                : () -> diagnosis.diagnose(o.address(), o.blockId(),
                        () -> SparkInterop.blockData(resolver, o.blockId()).createInputStream());
        // Not a READ: Spark's reader's rule, the FetchFailedException naming the block (its map is rerun)
        return decoder.records(stream, decoded, e -> failures.fetchFailed(o,
                BlockDecoder.corruption(o, null, BlockDecoder.diagnosed(o, why), e)));
    }

    /** Closes the open block's stream, if any. */
    void closeStream() {
        if (stream != null) {
            try {
                stream.close();
            } catch (IOException e) {
                LOG.debug("closing a local shuffle block's stream failed", e);
            }
            stream = null;
        }
    }

    @Override
    public void close() {
        closeStream();
    }
}
