package org.rdmashuffle.shuffle;

import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.function.Supplier;
import org.apache.spark.SparkEnv;
import org.apache.spark.serializer.SerializerInstance;
import org.apache.spark.serializer.SerializerManager;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import org.slf4j.LoggerFactory;
import scala.Tuple2;
import scala.collection.Iterator;

/**
 * Turns a block's bytes into records as Spark's reader does: decryption and decompression through the
 * SerializerManager, then the shuffle's serializer; with {@code spark.shuffle.detectCorrupt} a corrupt byte
 * met while records are read becomes the exception its block's {@link Corruption} gives (what that means is not
 * decided here). One per reduce task, used on its task thread only.
 */
final class BlockDecoder {
    /** What a block's bytes found corrupt while its records are read (some handed on already) become. */
    @FunctionalInterface
    interface Corruption {
        /** @return the exception to throw from the read that met {@code e} */
        RuntimeException corrupt(IOException e);
    }

    private final SerializerManager serializerManager;
    private final SerializerInstance serializer;
    private final boolean detectCorrupt;
    private final boolean detectCorruptEarly;
    /** Decoded bytes read at once with {@code detectCorrupt.useExtraMemory}. */
    private final long decodeAheadBytes;

    BlockDecoder(SparkEnv env, SerializerInstance serializer, long maxBytesInFlight) {
        this.serializerManager = env.serializerManager();
        this.serializer = serializer;
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
     * becomes what {@code corruption} gives: for a local block the {@code FetchFailedException} Spark's reader
     * throws, naming the block's map output (so Spark reruns that map instead of failing the task until the job
     * aborts); for a READ block what the core decides ({@link ReadOutcomeTranslator#corruptMidDecode}).
     */
    Iterator<Tuple2<Object, Object>> records(InputStream raw, InputStream decoded, Corruption corruption) {
        return SparkInterop.records(serializer, decoded == raw || !detectCorrupt ? decoded
                : new CorruptionGuard(decoded, corruption));
    }

    /**
     * The failure of block {@code o}, found corrupt ({@code e}) while its records were read, from {@code r} (null:
     * a local block): its message is the cause {@code diagnosed} (Spark's sentence, asked of the serving side with
     * the block's checksum), when there is one.
     */
    static FetchFailure corruption(BlockOrigin o, BlockFetcher.Request r, String diagnosed, IOException e) {
        return new FetchFailure(r, FetchFailure.Kind.CORRUPT, diagnosed != null ? diagnosed + " (from " + o.address()
                + ": " + e.getMessage() + ")" : "block " + o.blockId() + " from " + o.address() + " is corrupt: "
                + e.getMessage(), e, false);
    }

    /** Asks {@code diagnosis} why block {@code o} is corrupt: null when it cannot say (logged). */
    static String diagnosed(BlockOrigin o, Supplier<String> diagnosis) {
        try {
            return diagnosis.get();
        } catch (RuntimeException d) {
            LoggerFactory.getLogger(BlockDecoder.class).warn("cannot diagnose corrupt block {}", o.blockId(), d);
            return null;
        }
    }

    /** The records of a stream Spark's fetcher decoded (and checked) already. */
    Iterator<Tuple2<Object, Object>> records(InputStream decoded) {
        return SparkInterop.records(serializer, decoded);
    }

    private static final class CorruptionGuard extends FilterInputStream {
        private final Corruption corruption;

        CorruptionGuard(InputStream decoded, Corruption corruption) {
            super(decoded);
            this.corruption = corruption;
        }

        private RuntimeException corrupt(IOException e) {
            return corruption.corrupt(e);
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
