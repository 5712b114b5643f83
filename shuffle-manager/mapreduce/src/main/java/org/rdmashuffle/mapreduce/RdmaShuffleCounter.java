package org.rdmashuffle.mapreduce;

/**
 * What a reduce task of {@link RdmaShuffle} counts, in the job's counters (group
 * {@code org.rdmashuffle.mapreduce.RdmaShuffleCounter}); Hadoop's own shuffle counters (shuffled maps, reduce
 * shuffle bytes, failed shuffles) count as well, over READs and HTTP alike.
 */
public enum RdmaShuffleCounter {
    /** Map outputs' partitions fetched with READs. */
    MAPS_READ,
    /** Bytes of those partitions (as stored: compressed when map outputs are). */
    BYTES_READ,
    /** Map outputs' partitions fetched with Hadoop's HTTP shuffle instead (no service, unregistered, refused). */
    MAPS_VIA_HTTP,
    /** NodeManagers this task fetched from over HTTP (one WARN each). */
    HOSTS_VIA_HTTP,
    /** Failed fetches of map outputs over READs, reported to Hadoop's scheduler as fetch failures. */
    READ_FAILURES,
    /** Milliseconds the task spent in its shuffle (from its start to the last map output fetched). */
    SHUFFLE_MILLIS
}
