package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.rdmashuffle.shuffle.core.fetch.ReadOutcome;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.RegionDescriptor;

/** How the MapReduce adapter turns the core's read outcomes into Hadoop's: copyFailed only for bad data. */
class RdmaFetcherOutcomeTest {
    private static final BlockFetcher.Request R = new BlockFetcher.Request(new NodeAddress("nm1", 13563, "tcp"),
            new RegionDescriptor(4096, 1024, 7), 0, 0, 0, 1);

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
}
