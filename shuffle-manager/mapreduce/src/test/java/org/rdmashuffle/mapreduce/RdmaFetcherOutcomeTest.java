package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import java.nio.channels.ClosedByInterruptException;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import org.rdmashuffle.mapreduce.RdmaFetcher.Verdict;
import org.rdmashuffle.pool.BufferPool;
import org.rdmashuffle.pool.BufferPoolException;
import org.rdmashuffle.pool.BufferPoolOptions;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.shuffle.core.fetch.ReadOutcome;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.RegionDescriptor;

/** How the MapReduce adapter turns the core's read outcomes into Hadoop's: copyFailed only for bad data. */
class RdmaFetcherOutcomeTest {
    private static final BlockFetcher.Request R = new BlockFetcher.Request(new NodeAddress("nm1", 13563, "tcp"),
            new RegionDescriptor(4096, 1024, 7), 0, 0, 0, 1);

    /** A fetcher thread (not started) of a task without a transport: its own node never failed, no host withdrew. */
    private static RdmaFetcher<Object, Object> fetcher() {
        return new RdmaFetcher<>(null, 0, null, "no transport in this test");
    }

    @Test
    void shouldReportCopyFailedOnlyWhenThePeerIsBlamedForBytesThatDoNotDecode() {
        for (FetchFailure.Kind kind : FetchFailure.Kind.values()) {
            FetchFailure f = new FetchFailure(R, kind, "x", null, false);
            for (ReadOutcome outcome : ReadOutcome.values()) {
                boolean expected = kind == FetchFailure.Kind.CORRUPT && outcome == ReadOutcome.BLAME_PEER;
                assertEquals(expected, RdmaFetcher.dataFault(outcome, f), kind + " " + outcome);
            }
        }
    }

    @Test
    void shouldSendTheMapToHttpWithoutBlamingItWhenThePoolRunsOutWhileTheMergeManagerReadsIt() {
        RdmaFetcher<Object, Object> f = fetcher();
        // a streamed block's window that its stream takes alone waits for the pool: at its cap past the timeout
        BufferPoolException exhausted = BufferPoolException.exhausted("pool at its cap of 64 MiB for 30000 ms");
        assertEquals(Verdict.VIA_HTTP, f.whileShuffling(exhausted, R), "an honest NodeManager blamed");
        assertEquals(Verdict.VIA_HTTP, f.whileShuffling(new IOException("decoding failed", exhausted), R),
                "wrapped by a codec: still the pool's");
        assertEquals(Verdict.VIA_HTTP, f.whileShuffling(
                new BufferPoolException("mmap failed", new OutOfMemoryError("Direct buffer memory"), true), R));
    }

    @Test
    void shouldStopReportingNothingWhenTheReducerIsShuttingDownWhileTheMergeManagerReadsABlock() {
        RdmaFetcher<Object, Object> f = fetcher();
        InterruptedException why = new InterruptedException();
        assertEquals(Verdict.STOP, f.whileShuffling(
                new IllegalStateException("interrupted while fetching a shuffle block", why), R));
        Thread.currentThread().interrupt(); // as shutDown() does: a write of an on-disk output fails with it
        try {
            assertEquals(Verdict.STOP, f.whileShuffling(new ClosedByInterruptException(), R));
            assertEquals(Verdict.STOP, f.whileShuffling(new BufferPoolException("interrupted while waiting"), R));
        } finally {
            Thread.interrupted();
        }
    }

    @Test
    @Timeout(60)
    void shouldFailTheTaskBlamingNobodyWhenTheFetchersOwnStateRefusesTheRead() throws Exception {
        RdmaShuffleConf tcp = new RdmaShuffleConf(Map.of("spark.shuffle.rdma.provider", "tcp"));
        IllegalStateException closed;
        try (RdmaNode node = RdmaTransport.open(tcp, NodeOptions.loopback());
             BufferPool pool = new BufferPool(BufferPoolOptions.from(tcp), node.sinkRegistrar())) {
            BlockFetcher closedFetcher = new BlockFetcher(node, pool, 1 << 20, 1 << 16, 1000);
            closedFetcher.close();
            closed = assertThrows(IllegalStateException.class, () -> closedFetcher.add(R));
        }
        assertEquals(Verdict.LOCAL_FAILURE, fetcher().whileShuffling(closed, R));
        assertEquals(Verdict.LOCAL_FAILURE, fetcher().whileShuffling(
                new BufferPoolException("a block of 3 GiB is larger than any buffer"), R));
    }

    @Test
    void shouldReportCopyFailedWhenTheBytesFailTheChecksumOrDoNotDecode() {
        RdmaFetcher<Object, Object> f = fetcher();
        assertEquals(Verdict.BAD_DATA, f.whileShuffling(new IOException("Checksum Error"), R));
        assertEquals(Verdict.BAD_DATA, f.whileShuffling(new InternalError("Could not decompress data"), R));
        // what a codec of Java code throws on corrupt input is the bytes' fault too, whatever its type
        assertEquals(Verdict.BAD_DATA, f.whileShuffling(new IllegalArgumentException("bad block header"), R));
        assertEquals(Verdict.BAD_DATA, f.whileShuffling(new ArrayIndexOutOfBoundsException(70_000), R));
        assertEquals(Verdict.BAD_DATA, f.whileShuffling(new IllegalStateException("decoder in a bad state"), R));
        assertEquals(Verdict.BAD_DATA, f.whileShuffling(new NegativeArraySizeException("-3"), R));
    }

    @Test
    void shouldSendTheMapToHttpWhenAStreamedWindowFailsWrappedOrNot() {
        RdmaFetcher<Object, Object> f = fetcher();
        FetchFailure window = new FetchFailure(R, FetchFailure.Kind.WINDOW, "data READ failed", null, false);
        RuntimeException failed = streamFailed(window);
        assertEquals(Verdict.VIA_HTTP, f.whileShuffling(failed, R));
        assertEquals(Verdict.VIA_HTTP, f.whileShuffling(new IOException("codec", failed), R));
    }

    private static RuntimeException streamFailed(FetchFailure f) {
        try {
            var c = BlockFetcher.StreamFailed.class.getDeclaredConstructor(FetchFailure.class);
            c.setAccessible(true);
            return c.newInstance(f);
        } catch (ReflectiveOperationException e) {
            throw new AssertionError(e);
        }
    }
}
