package org.rdmashuffle.shuffle;

import java.io.IOException;
import java.io.InputStream;
import java.util.List;
import org.apache.spark.network.buffer.ManagedBuffer;
import org.apache.spark.shuffle.ShuffleBlockResolver;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.rdmashuffle.shuffle.core.FetchFailure;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;
import scala.Tuple2;
import scala.collection.Iterator;

/**
 * A reduce task's blocks written on this executor, read straight from disk through Spark's block resolver,
 * one open at a time, with Spark's local read metrics. On the task thread. A block that cannot be opened or
 * decoded blames this executor's map output ({@link FetchFailures#fetchFailed}), as Spark's reader does.
 */
final class LocalBlocks implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(LocalBlocks.class);

    private final List<BlockOrigin> blocks;
    private final ShuffleBlockResolver resolver;
    private final BlockDecoder decoder;
    private final FetchFailures failures;
    private final ShuffleReadMetricsReporter metrics;
    private int next;
    /** The open block's stream, or null. */
    private InputStream stream;

    LocalBlocks(List<BlockOrigin> blocks, ShuffleBlockResolver resolver, BlockDecoder decoder,
                FetchFailures failures, ShuffleReadMetricsReporter metrics) {
        this.blocks = blocks;
        this.resolver = resolver;
        this.decoder = decoder;
        this.failures = failures;
        this.metrics = metrics;
    }

    boolean hasNext() {
        return next < blocks.size();
    }

    /** Whether a block is open (its records are being read). */
    boolean reading() {
        return stream != null;
    }

    /** Opens the next block; the caller closes the previous one first ({@link #closeStream}). */
    Iterator<Tuple2<Object, Object>> openNext() {
        BlockOrigin o = blocks.get(next++);
        InputStream decoded;
        try {
            ManagedBuffer data = resolver.getBlockData(o.blockId(), Option.empty());
            stream = data.createInputStream();
            metrics.incLocalBlocksFetched(1);
            metrics.incLocalBytesRead(data.size());
            decoded = decoder.decode(o, stream);
        } catch (IOException | RuntimeException e) {
            // as Spark's reader: a local block that cannot be opened or decoded fails the fetch at once
            throw failures.fetchFailed(o, new FetchFailure(null, "cannot read local block " + o.blockId() + ": "
                    + e.getMessage(), e));
        }
        return decoder.records(o, stream, decoded);
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
