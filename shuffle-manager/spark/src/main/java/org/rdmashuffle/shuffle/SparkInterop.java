package org.rdmashuffle.shuffle;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import org.apache.spark.SparkConf;
import org.apache.spark.internal.config.package$;
import org.apache.spark.scheduler.MapStatus$;
import org.apache.spark.serializer.SerializerInstance;
import org.apache.spark.serializer.SerializerManager;
import org.apache.spark.shuffle.FetchFailedException;
import org.apache.spark.storage.BlockId;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.util.SystemClock;
import org.apache.spark.util.Utils;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.storage.ShuffleBlockFetcherIterator;
import org.rdmashuffle.shuffle.core.fetch.ByteBufferInputStream;
import org.rdmashuffle.shuffle.core.fetch.FetchFailure;
import scala.Option;
import scala.Tuple3;
import scala.math.Ordering;
import org.apache.spark.util.collection.ExternalSorter;
import scala.collection.JavaConverters;
import scala.Tuple2;

/**
 * The one place that speaks Scala to Spark: stream wrapping and deserialisation of fetched blocks,
 * what the MapOutputTracker's block sizes mean, and the exception that makes Spark rerun a map stage. The rest of the project is plain Java.
 */
public final class SparkInterop {
    private SparkInterop() {
    }

    /**
     * The key-value records of one fetched block: the bytes go through the {@link SerializerManager}
     * (decryption, decompression, as Spark's own reader does) and then the shuffle's serializer,
     * through {@code serializer} — one instance per reading task, as Spark's reader keeps it.
     */
    public static <K, V> scala.collection.Iterator<Tuple2<K, V>> records(SerializerManager serializerManager,
                                                                        SerializerInstance serializer, BlockId blockId,
                                                                        ByteBuffer bytes) {
        return records(serializerManager, serializer, blockId, new ByteBufferInputStream(bytes));
    }

    /** As {@link #records(SerializerManager, SerializerInstance, BlockId, ByteBuffer)}, from a stream (a local block). */
    public static <K, V> scala.collection.Iterator<Tuple2<K, V>> records(SerializerManager serializerManager,
                                                                        SerializerInstance serializer, BlockId blockId,
                                                                        InputStream stream) {
        return records(serializer, serializerManager.wrapStream(blockId, stream));
    }

    /** The key-value records of a block's stream that is already decrypted and decompressed. */
    @SuppressWarnings("unchecked")
    public static <K, V> scala.collection.Iterator<Tuple2<K, V>> records(SerializerInstance serializer,
                                                                        InputStream decoded) {
        Object it = serializer.deserializeStream(decoded).asKeyValueIterator();
        return (scala.collection.Iterator<Tuple2<K, V>>) it;
    }

    /**
     * Spark's decryption and decompression around a block's bytes; {@code stream} itself when the
     * block is neither compressed nor encrypted.
     *
     * @throws IOException when the wrapping already reads bytes that are corrupt
     */
    public static InputStream decoded(SerializerManager serializerManager, BlockId blockId, InputStream stream)
            throws IOException {
        try {
            return serializerManager.wrapStream(blockId, stream);
        } catch (RuntimeException e) {
            throw e;
        } catch (Exception e) { // Scala declares nothing: an IOException arrives undeclared
            throw asIOException(e);
        }
    }

    /**
     * Decodes up to {@code maxBytes} of {@code decoded} into memory at once (Spark's
     * {@code spark.shuffle.detectCorrupt.useExtraMemory}), so corruption there shows before any record
     * is handed on; the stream continues with the rest.
     */
    public static InputStream decodeAhead(InputStream decoded, long maxBytes) throws IOException {
        try {
            return Utils.copyStreamUpTo(decoded, maxBytes);
        } catch (RuntimeException e) {
            throw e;
        } catch (Exception e) {
            throw asIOException(e);
        }
    }

    /**
     * An undeclared exception out of Spark's stream wrappers: an IOException is the block's (corrupt or
     * unreadable bytes); a {@code FetchFailedException} thrown by the stream underneath (a streamed block's
     * window that failed) passes through as it is, so that it fails the fetch instead of being taken for
     * corruption and READ again.
     */
    private static IOException asIOException(Exception e) {
        if (e instanceof FetchFailedException) {
            throw sneakyThrow(e);
        }
        return e instanceof IOException io ? io : new IOException(e);
    }

    /**
     * Spark's own fetcher over {@code blocksByAddress} (the MapOutputTracker's entries, as it gave
     * them): blocks through the executors' block managers, as Spark's reader fetches them, with Spark's
     * settings for bytes and requests in flight, corruption detection and checksums. Each stream comes
     * decrypted and decompressed; the iterator releases what it holds when the task ends. With {@code batch}
     * ({@link #batchFetch}) it fetches each map output's run of blocks as one, as Spark's reader does.
     */
    @SuppressWarnings("deprecation") // scala.collection.JavaConverters: the one converter Scala 2.12 and 2.13 share
    public static scala.collection.Iterator<Tuple2<BlockId, InputStream>> fetchThroughSpark(
            TaskContext context, java.util.Map<BlockManagerId, java.util.List<Tuple3<BlockId, Object, Object>>> blocksByAddress,
            ShuffleReadMetricsReporter metrics, boolean batch) {
        SparkEnv env = SparkEnv.get();
        SparkConf c = env.conf();
        java.util.List<Tuple2<BlockManagerId, scala.collection.Seq<Tuple3<BlockId, Object, Object>>>> list =
                new java.util.ArrayList<>();
        blocksByAddress.forEach((address, blocks) -> list.add(new Tuple2<>(address,
                JavaConverters.asScalaBuffer(blocks).toList())));
        SerializerManager sm = env.serializerManager();
        scala.Function2<BlockId, InputStream, InputStream> wrap = sm::wrapStream;
        package$ k = package$.MODULE$;
        return new ShuffleBlockFetcherIterator(context, env.blockManager().blockStoreClient(), env.blockManager(),
                env.mapOutputTracker(), JavaConverters.asScalaIterator(list.iterator()), wrap,
                (Long) c.get(k.REDUCER_MAX_SIZE_IN_FLIGHT()) * 1024 * 1024,
                (Integer) c.get(k.REDUCER_MAX_REQS_IN_FLIGHT()),
                (Integer) c.get(k.REDUCER_MAX_BLOCKS_IN_FLIGHT_PER_ADDRESS()),
                (Long) c.get(k.MAX_REMOTE_BLOCK_SIZE_FETCH_TO_MEM()),
                (Integer) c.get(k.SHUFFLE_MAX_ATTEMPTS_ON_NETTY_OOM()),
                detectCorrupt(c), detectCorruptUseExtraMemory(c),
                (Boolean) c.get(k.SHUFFLE_CHECKSUM_ENABLED()), (String) c.get(k.SHUFFLE_CHECKSUM_ALGORITHM()),
                metrics, batch, new SystemClock());
    }

    /**
     * Spark's {@code ExternalSorter} by {@code ordering}, with no aggregator or partitioner, as Spark's reader
     * builds it. Its constructor is the one Spark call that differs between the lines this source builds:
     * {@code (TaskContext, Option, Option, Option, Serializer)} up to 4.0, and from 4.1 a sixth parameter, the
     * shuffle's row-based checksums (an array type 4.0 does not have), which a reader passes empty. The
     * constructor is found once, by shape, so the same class file links on every line.
     */
    @SuppressWarnings("unchecked")
    public static <K, C> ExternalSorter<K, C, C> sorter(TaskContext context, Option<Ordering<K>> ordering,
                                                        org.apache.spark.serializer.Serializer serializer) {
        Option<Object> none = Option.empty();
        try {
            return (ExternalSorter<K, C, C>) (SorterShape.NO_CHECKSUMS == null
                    ? SorterShape.CONSTRUCTOR.newInstance(context, none, none, ordering, serializer)
                    : SorterShape.CONSTRUCTOR.newInstance(context, none, none, ordering, serializer,
                            SorterShape.NO_CHECKSUMS));
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot build Spark's ExternalSorter with "
                    + SorterShape.CONSTRUCTOR, e instanceof java.lang.reflect.InvocationTargetException t
                    ? t.getCause() : e);
        }
    }

    /**
     * {@code records} sorted by {@code ordering} through a {@link #sorter} (spilling as Spark's reader does), its
     * spill metrics added to the task's.
     */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static <K, C> scala.collection.Iterator<scala.Product2<K, C>> sortedByKey(TaskContext context,
            Option<Ordering<K>> ordering, org.apache.spark.serializer.Serializer serializer,
            scala.collection.Iterator<scala.Product2<K, C>> records) {
        ExternalSorter<K, C, C> sorter = sorter(context, ordering, serializer);
        return (scala.collection.Iterator) sorter.insertAllAndUpdateMetrics((scala.collection.Iterator) records);
    }

    /** Which ExternalSorter constructor this Spark has (see {@link #sorter}). */
    private static final class SorterShape {
        static final java.lang.reflect.Constructor<?> CONSTRUCTOR;
        /** An empty array of 4.1's checksum type, or null where the constructor has no such parameter. */
        static final Object NO_CHECKSUMS;

        static {
            java.lang.reflect.Constructor<?> five = null;
            java.lang.reflect.Constructor<?> six = null;
            for (java.lang.reflect.Constructor<?> k : ExternalSorter.class.getConstructors()) {
                Class<?>[] p = k.getParameterTypes();
                if (p.length == 6 && p[0] == TaskContext.class && p[5].isArray()) {
                    six = k;
                } else if (p.length == 5 && p[0] == TaskContext.class) {
                    five = k;
                }
            }
            if (six == null && five == null) {
                throw new ExceptionInInitializerError("this Spark's ExternalSorter has neither the constructor of "
                        + "Spark 3.5/4.0 nor that of 4.1+: " + java.util.Arrays.toString(ExternalSorter.class.getConstructors()));
            }
            CONSTRUCTOR = six != null ? six : five;
            NO_CHECKSUMS = six != null ? java.lang.reflect.Array.newInstance(six.getParameterTypes()[5].getComponentType(), 0) : null;
        }
    }

    /**
     * Whether this executor's Spark reads blocks of other executors on its host from their disk
     * ({@code spark.shuffle.readHostLocalDisk}, on by default, without {@code spark.shuffle.useOldFetchProtocol}):
     * its block manager then has a host-local directory manager, which Spark's fetcher asks for their
     * directories.
     */
    public static boolean readsHostLocalDisk(SparkEnv env) {
        return env.blockManager().hostLocalDirManager().isDefined();
    }

    /** {@code spark.shuffle.checksum.enabled}: whether map outputs carry checksums to diagnose corruption with. */
    public static boolean shuffleChecksumEnabled(SparkConf conf) {
        return (Boolean) conf.get(package$.MODULE$.SHUFFLE_CHECKSUM_ENABLED());
    }

    /** {@code spark.shuffle.checksum.algorithm}. */
    public static String shuffleChecksumAlgorithm(SparkConf conf) {
        return (String) conf.get(package$.MODULE$.SHUFFLE_CHECKSUM_ALGORITHM());
    }

    /**
     * Whether a reduce task of partitions {@code [start, end)} fetches each map output's run of its partitions
     * as one block, decoded as one stream, as Spark's reader does: asked for by the task
     * ({@code spark.sql.adaptive.fetchShuffleBlocksInBatch} sets a local property on AQE's coalesced reads)
     * and possible — a serializer whose records can be relocated, no compression or a codec whose streams
     * concatenate, neither the old fetch protocol nor I/O encryption.
     */
    public static boolean batchFetch(org.apache.spark.ShuffleDependency<?, ?, ?> dep, int start, int end,
                                     TaskContext context) {
        if (!org.apache.spark.shuffle.sort.SortShuffleManager$.MODULE$.canUseBatchFetch(start, end, context)
                || !dep.serializer().supportsRelocationOfSerializedObjects()) {
            return false;
        }
        SparkConf c = SparkEnv.get().conf();
        package$ k = package$.MODULE$;
        boolean compressed = (Boolean) c.get(k.SHUFFLE_COMPRESS());
        return (!compressed || org.apache.spark.io.CompressionCodec$.MODULE$.supportsConcatenationOfSerializedStreams(
                org.apache.spark.io.CompressionCodec$.MODULE$.createCodec(c)))
                && !(Boolean) c.get(k.SHUFFLE_USE_OLD_FETCH_PROTOCOL()) && !(Boolean) c.get(k.IO_ENCRYPTION_ENABLED());
    }

    /** {@code spark.shuffle.detectCorrupt}: whether a corrupt compressed or encrypted block fails the fetch. */
    public static boolean detectCorrupt(SparkConf conf) {
        return (Boolean) conf.get(package$.MODULE$.SHUFFLE_DETECT_CORRUPT());
    }

    /** {@code spark.shuffle.detectCorrupt.useExtraMemory}: decode a block's start eagerly to find corruption early. */
    public static boolean detectCorruptUseExtraMemory(SparkConf conf) {
        return (Boolean) conf.get(package$.MODULE$.SHUFFLE_DETECT_CORRUPT_MEMORY());
    }

    /**
     * Throws {@code e} from code Spark calls as Scala (which has no checked exceptions): Spark's task
     * runner recognises a {@link FetchFailedException} and reruns the map stage.
     */
    public static RuntimeException sneakyThrow(Throwable e) {
        throw SparkInterop.<RuntimeException>sneaky(e);
    }

    @SuppressWarnings("unchecked")
    private static <T extends Throwable> T sneaky(Throwable e) throws T {
        throw (T) e;
    }

    /**
     * The most bytes a shuffle block may hold when the MapOutputTracker reports {@code reportedBytes} for
     * it. The tracker's sizes are not exact: a {@code MapStatus} keeps each size as a power of 1.1 rounded
     * up (so never below the true size, apart from float rounding, which the 1% here covers); with more
     * than {@code spark.shuffle.minNumPartitionsToHighlyCompress} partitions only blocks above
     * {@code spark.shuffle.accurateBlockThreshold} (or skewed ones) are kept so, and the others are
     * reported as the average of the small blocks, so each may hold up to that threshold.
     */
    public static long mostBytesOfBlock(long reportedBytes, int numPartitions, SparkConf conf) {
        long most = reportedBytes >= MapStatus$.MODULE$.decompressSize((byte) 255)
                ? Long.MAX_VALUE // the largest size a MapStatus can record: the block may be larger
                : reportedBytes + reportedBytes / 100 + 1;
        int highlyCompressedAbove = (Integer) conf.get(package$.MODULE$.SHUFFLE_MIN_NUM_PARTS_TO_HIGHLY_COMPRESS());
        if (numPartitions > highlyCompressedAbove) {
            most = Math.max(most, (Long) conf.get(package$.MODULE$.SHUFFLE_ACCURATE_BLOCK_THRESHOLD()));
        }
        return most;
    }

    /** A {@link FetchFailedException} for {@code failure}, naming the map output and reduce partition. */
    public static FetchFailedException fetchFailed(BlockManagerId address, int shuffleId, long mapId, int mapIndex,
                                                   int reduceId, FetchFailure failure) {
        return new FetchFailedException(address, shuffleId, mapId, mapIndex, reduceId, failure.getMessage(), failure);
    }

    /**
     * Calls {@code removed} with the id of every executor Spark removes from now on (killed, lost,
     * released by dynamic allocation, decommissioned), from the active SparkContext's listener bus.
     * Does nothing without an active SparkContext (a directory started outside a driver, in tests).
     */
    static void onExecutorRemoved(java.util.function.Consumer<String> removed) {
        scala.Option<org.apache.spark.SparkContext> sc = org.apache.spark.SparkContext$.MODULE$.getActive();
        if (sc.isDefined()) {
            sc.get().addSparkListener(new org.apache.spark.scheduler.SparkListener() {
                @Override
                public void onExecutorRemoved(org.apache.spark.scheduler.SparkListenerExecutorRemoved e) {
                    removed.accept(e.executorId());
                }
            });
        }
    }

    /**
     * Whether the driver's map output tracker still holds a shuffle: Spark registers a shuffle there before
     * its first map task and removes it when it cleans the shuffle. A process whose tracker is not the
     * driver's answers that it knows every shuffle (so nothing is ever dropped on its word).
     */
    static java.util.function.IntPredicate shuffleKnown(SparkEnv env) {
        if (env.mapOutputTracker() instanceof org.apache.spark.MapOutputTrackerMaster master) {
            return master::containsShuffle;
        }
        org.slf4j.LoggerFactory.getLogger(SparkInterop.class).warn("rdma-shuffle: the driver's map output "
                + "tracker is a {}, not Spark's MapOutputTrackerMaster: "
                + "executors' orphan checks will drop nothing", env.mapOutputTracker().getClass().getName());
        return id -> true;
    }

    /** Whether executors' shuffle files are also served by an external shuffle service. */
    static boolean externalShuffleService(SparkConf conf) {
        return conf.getBoolean("spark.shuffle.service.enabled", false);
    }

    /** Whether this JVM has an active SparkContext (a driver that finished starting). */
    static boolean sparkContextActive() {
        return org.apache.spark.SparkContext$.MODULE$.getActive().isDefined();
    }

    /** A reference to the driver's RPC endpoint {@code name}, as Spark's own executors make theirs. */
    static org.apache.spark.rpc.RpcEndpointRef driverEndpoint(String name, SparkConf conf,
                                                            org.apache.spark.rpc.RpcEnv rpcEnv) {
        return org.apache.spark.util.RpcUtils$.MODULE$.makeDriverRef(name, conf, rpcEnv);
    }

    /** An RPC timeout of {@code seconds}, named {@code description} in Spark's timeout message. */
    static org.apache.spark.rpc.RpcTimeout rpcTimeout(long seconds, String description) {
        return new org.apache.spark.rpc.RpcTimeout(
                scala.concurrent.duration.FiniteDuration.apply(seconds, java.util.concurrent.TimeUnit.SECONDS),
                description);
    }

    /** Asks {@code endpoint} and waits for the answer within Spark's default RPC timeout. */
    static Object ask(org.apache.spark.rpc.RpcEndpointRef endpoint, Object message) {
        return endpoint.askSync(message, scala.reflect.ClassTag$.MODULE$.Any());
    }

    /** Asks {@code endpoint} and waits for the answer within {@code timeout}. */
    static Object ask(org.apache.spark.rpc.RpcEndpointRef endpoint, Object message,
                      org.apache.spark.rpc.RpcTimeout timeout) {
        return endpoint.askSync(message, timeout, scala.reflect.ClassTag$.MODULE$.Any());
    }

    /**
     * An RPC endpoint's {@code receiveAndReply} in Java terms: the messages {@code accepts} takes go to
     * {@code handle} (which replies through the call context); the rest are left to Spark.
     */
    static scala.PartialFunction<Object, scala.runtime.BoxedUnit> replies(
            java.util.function.Predicate<Object> accepts, java.util.function.Consumer<Object> handle) {
        return new scala.runtime.AbstractPartialFunction<Object, scala.runtime.BoxedUnit>() {
            @Override
            public boolean isDefinedAt(Object m) {
                return accepts.test(m);
            }

            @Override
            public <A1, B1> B1 applyOrElse(A1 m, scala.Function1<A1, B1> otherwise) {
                if (!accepts.test(m)) {
                    return otherwise.apply(m);
                }
                handle.accept(m);
                @SuppressWarnings("unchecked")
                B1 unit = (B1) scala.runtime.BoxedUnit.UNIT;
                return unit;
            }
        };
    }

    /** A Scala sequence Spark hands over, as a Java list (a view, not a copy). */
    @SuppressWarnings("deprecation") // scala.collection.JavaConverters: the one converter Scala 2.12 and 2.13 share
    static <T> java.util.List<T> asJava(scala.collection.Seq<T> seq) {
        return JavaConverters.seqAsJavaList(seq);
    }

    /** A shuffle block's data from {@code resolver}, as Spark's local reads ask for it (no merged-shuffle dirs). */
    static org.apache.spark.network.buffer.ManagedBuffer blockData(
            org.apache.spark.shuffle.ShuffleBlockResolver resolver, BlockId id) {
        return resolver.getBlockData(id, Option.empty());
    }

    /**
     * The executors whose block managers the driver knows now, id to host (the driver's own included, as
     * {@code driver}), in a stable order: what {@code executor_<host>_<id>} task locations name.
     */
    static java.util.Map<String, String> blockManagerHosts(SparkEnv driverEnv) {
        java.util.Map<String, String> hosts = new java.util.TreeMap<>();
        scala.collection.Iterator<BlockManagerId> ids = driverEnv.blockManager().master().getMemoryStatus()
                .keysIterator();
        while (ids.hasNext()) {
            BlockManagerId id = ids.next();
            hosts.put(id.executorId(), id.host());
        }
        return hosts;
    }

    /**
     * One partition per item, each preferring the one location given for it ({@code executor_<host>_<id>}
     * pins its task to that executor while it has a free core; Spark's delay scheduling decides the rest).
     */
    @SuppressWarnings({"deprecation", "unchecked", "rawtypes"}) // JavaConverters: shared by Scala 2.12 and 2.13
    static <T> org.apache.spark.api.java.JavaRDD<T> pinned(org.apache.spark.SparkContext sc, java.util.List<T> items,
                                                           java.util.List<String> locations) {
        if (items.size() != locations.size()) {
            throw new IllegalArgumentException(items.size() + " items for " + locations.size() + " locations");
        }
        java.util.List<Tuple2> withPlaces = new java.util.ArrayList<>();
        for (int i = 0; i < items.size(); i++) {
            withPlaces.add(new Tuple2(items.get(i),
                    JavaConverters.asScalaBuffer(java.util.List.of(locations.get(i))).toList()));
        }
        scala.reflect.ClassTag<T> tag = (scala.reflect.ClassTag) scala.reflect.ClassTag$.MODULE$.AnyRef();
        org.apache.spark.rdd.RDD<T> rdd = sc.makeRDD((scala.collection.immutable.List) JavaConverters
                .asScalaBuffer(withPlaces).toList(), tag);
        return org.apache.spark.api.java.JavaRDD.fromRDD(rdd, tag);
    }
}
