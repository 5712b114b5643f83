package org.rdmashuffle.shuffle;

import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import org.apache.spark.SparkEnv;
import org.apache.spark.serializer.SerializerInstance;
import org.apache.spark.serializer.SerializerManager;
import org.rdmashuffle.shuffle.core.FetchFailure;
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
     * reruns that map instead of failing the task until the job aborts.
     */
    Iterator<Tuple2<Object, Object>> records(BlockOrigin o, InputStream raw, InputStream decoded) {
        return SparkInterop.records(serializer, decoded == raw || !detectCorrupt ? decoded
                : new CorruptionGuard(o, decoded));
    }

    /** The records of a stream Spark's fetcher decoded (and checked) already. */
    Iterator<Tuple2<Object, Object>> records(InputStream decoded) {
        return SparkInterop.records(serializer, decoded);
    }

    private final class CorruptionGuard extends FilterInputStream {
        private final BlockOrigin origin;

        CorruptionGuard(BlockOrigin origin, InputStream decoded) {
            super(decoded);
            this.origin = origin;
        }

        private RuntimeException corrupt(IOException e) {
            return failures.fetchFailed(origin, new FetchFailure(null, "block " + origin.blockId() + " from "
                    + origin.address() + " is corrupt: " + e.getMessage(), e));
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
