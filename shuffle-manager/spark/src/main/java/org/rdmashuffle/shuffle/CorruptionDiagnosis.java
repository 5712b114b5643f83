package org.rdmashuffle.shuffle;

import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.concurrent.Callable;
import java.util.function.Supplier;
import java.util.zip.Checksum;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.network.shuffle.BlockStoreClient;
import org.apache.spark.network.shuffle.checksum.Cause;
import org.apache.spark.network.shuffle.checksum.ShuffleChecksumHelper;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.storage.ShuffleBlockId;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Why a block was corrupt, found with Spark's shuffle checksums ({@code spark.shuffle.checksum.enabled}, on by
 * default) the way Spark's own reader finds it: the checksum of the block's bytes as this reducer got them
 * goes to the executor that wrote the block (or the external shuffle service serving its files) over Spark's
 * block transfer service; that side reads the checksum the writer stored, recomputes the block's on its disk
 * and answers {@code DISK_ISSUE} (disk and stored checksum differ), {@code NETWORK_ISSUE} (the disk is
 * right, the bytes received are not), {@code CHECKSUM_VERIFY_PASS} or {@code UNKNOWN_ISSUE}. The answer
 * becomes the fetch failure's message, in Spark's words, so operators read the same cause under both
 * shuffles.
 *
 * <p>Only after corruption was found (a block corrupt twice, or mid-stream): never on the data path. On the
 * task thread; the question is one synchronous RPC to the serving side, bounded by Spark's own timeout, and
 * any failure of it is {@code UNKNOWN_ISSUE}.
 */
final class CorruptionDiagnosis {
    private static final Logger LOG = LoggerFactory.getLogger(CorruptionDiagnosis.class);

    private final BlockStoreClient client;
    /** The checksum algorithm, or null when shuffle checksums are off. */
    private final String algorithm;

    CorruptionDiagnosis(SparkEnv env) {
        this(env, env.conf());
    }

    /** With the checksum settings of {@code conf} (tests). */
    CorruptionDiagnosis(SparkEnv env, SparkConf conf) {
        this.client = env.blockManager().blockStoreClient();
        this.algorithm = SparkInterop.shuffleChecksumEnabled(conf) ? SparkInterop.shuffleChecksumAlgorithm(conf) : null;
    }

    /** Whether shuffle checksums are on, so that a corrupt block can be diagnosed. */
    boolean enabled() {
        return algorithm != null;
    }

    /**
     * The cause of block {@code id}'s corruption from the checksum of {@code received}, its bytes as this
     * reducer got them (read from its position to its limit, not consumed).
     *
     * @return Spark's sentence for the cause, or null when shuffle checksums are off
     */
    String diagnose(BlockManagerId address, ShuffleBlockId id, ByteBuffer received) {
        return question(address, id, received).get();
    }

    /**
     * As {@link #diagnose(BlockManagerId, ShuffleBlockId, ByteBuffer)} in two steps: the checksum of
     * {@code received} now, the question to the serving side when the result is asked for — so that the
     * caller can give the bytes' buffer back before it waits for the answer.
     */
    Supplier<String> question(BlockManagerId address, ShuffleBlockId id, ByteBuffer received) {
        if (algorithm == null) {
            return () -> null;
        }
        Checksum c = newChecksum();
        if (c == null) {
            return () -> sentence(id, Cause.UNSUPPORTED_CHECKSUM_ALGORITHM);
        }
        c.update(received.duplicate());
        long value = c.getValue();
        return () -> ask(address, id, value);
    }

    /**
     * As {@link #diagnose(BlockManagerId, ShuffleBlockId, ByteBuffer)}, the bytes from a stream {@code opener}
     * opens (only when checksums are on), read to its end and closed.
     */
    String diagnose(BlockManagerId address, ShuffleBlockId id, Callable<InputStream> opener) {
        if (algorithm == null) {
            return null;
        }
        Checksum c = newChecksum();
        if (c == null) {
            return sentence(id, Cause.UNSUPPORTED_CHECKSUM_ALGORITHM);
        }
        byte[] chunk = new byte[ShuffleChecksumHelper.CHECKSUM_CALCULATION_BUFFER];
        try (InputStream in = opener.call()) {
            for (int n; (n = in.read(chunk)) != -1; ) {
                c.update(chunk, 0, n);
            }
        } catch (Exception e) {
            LOG.warn("cannot read block {} again to diagnose its corruption", id, e);
            return sentence(id, Cause.UNKNOWN_ISSUE);
        }
        return ask(address, id, c.getValue());
    }

    /** A checksum of the configured algorithm, or null when Spark does not know it. */
    private Checksum newChecksum() {
        try {
            return ShuffleChecksumHelper.getChecksumByAlgorithm(algorithm);
        } catch (UnsupportedOperationException e) {
            return null;
        }
    }

    /** Spark's sentence for a block that cannot be diagnosed, with why. */
    String notDiagnosed(ShuffleBlockId id, String why) {
        return algorithm == null ? null : "Block " + id + " is corrupted but the cause is unknown (" + why + ")";
    }

    private String ask(BlockManagerId address, ShuffleBlockId id, long checksum) {
        long t0 = System.nanoTime();
        Cause cause;
        try {
            cause = client.diagnoseCorruption(address.host(), address.port(), address.executorId(), id.shuffleId(),
                    id.mapId(), id.reduceId(), checksum, algorithm);
        } catch (RuntimeException e) {
            LOG.warn("asking {} why block {} is corrupt failed", address, id, e);
            cause = Cause.UNKNOWN_ISSUE;
        }
        String s = sentence(id, cause);
        LOG.info("corruption diagnosis of block {} from {} in {} ms: {}", id, address,
                (System.nanoTime() - t0) / 1_000_000, s);
        return s;
    }

    /** The cause in the words Spark's reader uses, so that the same searches find it under both shuffles. */
    private String sentence(ShuffleBlockId id, Cause cause) {
        return switch (cause) {
            case UNSUPPORTED_CHECKSUM_ALGORITHM -> "Block " + id + " is corrupted but corruption diagnosis failed "
                    + "due to unsupported checksum algorithm: " + algorithm;
            case CHECKSUM_VERIFY_PASS -> "Block " + id + " is corrupted but checksum verification passed";
            case UNKNOWN_ISSUE -> "Block " + id + " is corrupted but the cause is unknown";
            default -> "Block " + id + " is corrupted due to " + cause;
        };
    }
}
