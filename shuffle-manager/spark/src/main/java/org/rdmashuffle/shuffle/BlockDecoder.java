package org.rdmashuffle.shuffle;

import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.function.Supplier;
import org.apache.spark.SparkEnv;
import org.apache.spark.serializer.SerializerInstance;
import org.apache.spark.serializer.SerializerManager;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.slf4j.LoggerFactory;
import scala.Tuple2;
import scala.collection.Iterator;

/**
 * Turns a block's bytes into records as Spark's reader does: decryption and decompression through the
 * SerializerManager, then the shuffle's serializer; with {@code spark.shuffle.detectCorrupt} a corrupt byte
 * met while records are read becomes the FetchFailedException naming the block. One per reduce task, used on
 * its task thread only.
 */
final class BlockDecoder {
    private final SerializerManager serializerManager;
    private final SerializerInstance serializer;
    private final FetchFailures failures;
    private final boolean detectCorrupt;
    private final boolean detectCorruptEarly;
    /** Decoded bytes read at once with {@code detectCorrupt.useExtraMemory}. */
    private final long decodeAheadBytes;

    BlockDecoder(SparkEnv env, SerializerInstance serializer, FetchFailures failures, long maxBytesInFlight) {
        this.serializerManager = env.serializerManager();
        this.serializer = serializer;
        this.failures = failures;
        this.detectCorrupt = SparkInterop.detectCorrupt(env.conf());
        this.detectCorruptEarly = SparkInterop.detectCorruptUseExtraMemory(env.conf());
        this.decodeAheadBytes = Math.max(1, maxBytesInFlight / 3);
    }

    /**
     * Spark's decryption and decompression around a block's bytes, and with
     * {@code spark.shuffle.detectCorrupt.useExtraMemory} its first {@code maxBytesInFlight / 3}
     * decoded bytes at once, as Spark's reader does.
     *
     * @throws IOException when decoding cannot start (corrupt bytes)
     */
    InputStream decode(BlockOrigin o, InputStream raw) throws IOException {
        InputStream decoded = SparkInterop.decoded(serializerManager, o.blockId(), raw);
        if (decoded != raw && detectCorruptEarly) {
            decoded = SparkInterop.decodeAhead(decoded, decodeAheadBytes);
        }
        return decoded;
    }

    /**
     * The records of a block {@link #decode decoded} from {@code raw}: with {@code spark.shuffle.detectCorrupt}
     * and a compressed or encrypted block, an {@code IOException} while its records are read (a corrupt byte)
     * becomes the {@code FetchFailedException} Spark's reader throws, naming the block's map output, so Spark
     * reruns that map instead of failing the task until the job aborts. Its message is then the cause
     * {@code diagnosis} gives (Spark's sentence, asked of the serving side with the block's checksum), when
     * it gives one.
     */
    Iterator<Tuple2<Object, Object>> records(BlockOrigin o, InputStream raw, InputStream decoded,
                                             Supplier<String> diagnosis) {
        return SparkInterop.records(serializer, decoded == raw || !detectCorrupt ? decoded
                : new CorruptionGuard(o, decoded, diagnosis));
    }

    /** The records of a stream Spark's fetcher decoded (and checked) already. */
    Iterator<Tuple2<Object, Object>> records(InputStream decoded) {
        return SparkInterop.records(serializer, decoded);
    }

    private final class CorruptionGuard extends FilterInputStream {
        private final BlockOrigin origin;
        private final Supplier<String> diagnosis;

        CorruptionGuard(BlockOrigin origin, InputStream decoded, Supplier<String> diagnosis) {
            super(decoded);
            this.origin = origin;
            this.diagnosis = diagnosis;
        }

        private RuntimeException corrupt(IOException e) {
            String why = null;
            try {
                why = diagnosis.get();
            } catch (RuntimeException d) {
                LoggerFactory.getLogger(BlockDecoder.class).warn("cannot diagnose corrupt block {}", origin.blockId(), d);
            }
            return failures.fetchFailed(origin, new FetchFailure(null, why != null ? why + " (from " + origin.address()
                    + ": " + e.getMessage() + ")" : "block " + origin.blockId() + " from " + origin.address()
                    + " is corrupt: " + e.getMessage(), e));
        }

        @Override
        public int read() {
            try {
                return in.read();
            } catch (IOException e) {
                throw corrupt(e);
            }
        }

        @Override
        public int read(byte[] b, int off, int len) {
            try {
                return in.read(b, off, len);
            } catch (IOException e) {
                throw corrupt(e);
            }
        }

        @Override
        public long skip(long n) {
            try {
                return in.skip(n);
            } catch (IOException e) {
                throw corrupt(e);
            }
        }

        @Override
        public int available() {
            try {
                return in.available();
            } catch (IOException e) {
                throw corrupt(e);
            }
        }
    }
}
