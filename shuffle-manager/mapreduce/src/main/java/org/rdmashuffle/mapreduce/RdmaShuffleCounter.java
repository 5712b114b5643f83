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
    /**
     * Map outputs' partitions handed to Hadoop's HTTP fetcher instead (no service, unregistered, refused). The
     * fetcher takes every map the scheduler then knows on that host, so this can differ slightly from what HTTP
     * actually fetched; Hadoop's SHUFFLED_MAPS counts both ways exactly.
     */
    MAPS_VIA_HTTP,
    /**
     * NodeManagers this task fetched from over HTTP for the rest of its life: what does not change while a job runs
     * (another protocol or version on the port, a relay, a request the service calls bad) or this task's buffers
     * running out (one WARN each). A service down, restarting or busy is asked again later: SERVICE_UNREACHABLE,
     * SERVICE_BUSY.
     */
    HOSTS_VIA_HTTP,
    /**
     * Times a NodeManager's service was busy (at its connection limits) when this task connected: that host's
     * outputs of the turn went over HTTP, and READs were tried again after a wait (one WARN per host).
     */
    SERVICE_BUSY,
    /**
     * Times a NodeManager's service could not be asked (connection refused or lost, no answer, a READ that failed)
     * or did not know the job (a restarted service): that host's outputs went over HTTP for a while, then READs
     * were tried again (one WARN per host each time its trouble changes).
     */
    SERVICE_UNREACHABLE,
    /**
     * Fetches over READs that failed: a fault of the map's data (output missing, bad checksum), reported to
     * Hadoop's scheduler as the map's fetch failure, or a transport fault (a READ failed or timed out), after which
     * that host's outputs go to Hadoop's HTTP fetcher without blaming a map.
     */
    READ_FAILURES,
    /** Milliseconds the task spent in its shuffle (from its start to the last map output fetched). */
    SHUFFLE_MILLIS,
    /** Milliseconds opening the task's transport node and its pool of receive buffers. */
    OPEN_MILLIS,
    /** Milliseconds fetcher threads waited for REGISTER answers, summed over the threads. */
    REGISTER_MILLIS,
    /** Milliseconds fetcher threads waited for READs to complete, summed over the threads. */
    READ_WAIT_MILLIS,
    /**
     * Milliseconds fetcher threads spent handing READ bytes to the merge manager (checksum, decompression, copy,
     * writing to disk when the merge manager keeps the output there), summed over the threads. A partition larger
     * than the pool's largest buffer is READ window by window as it is handed on: those windows' waits count here.
     */
    MERGE_COPY_MILLIS
}
