package org.rdmashuffle.transport.verbs;

import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;
import org.rdmashuffle.conf.RdmaShuffleConf.VerbsApi;

/**
 * Which API the verbs provider reaches rdma-core through ({@code spark.shuffle.rdma.verbs.api}), and
 * what each lacks on this machine. {@code ffm} calls libibverbs and librdmacm through
 * {@code java.lang.foreign}: Java 22+ and the distribution's rdma-core libraries, nothing else; its
 * classes are compiled for Java 22 and ship in the jar's {@code META-INF/versions/22}, so a Java 17 JVM
 * never sees them. {@code disni} needs DiSNI's classes (in the shaded jar) and libdisni on
 * {@code java.library.path}. Both need an RDMA device.
 */
public final class VerbsApis {
    /** The foreign-function factory, present on Java 22+ in a jar built with its Java 22 classes. */
    static final String FFM_FACTORY = "org.rdmashuffle.transport.verbs.FfmDeviceFactory";
    /** The first Java release whose foreign function API is final. */
    static final int FFM_JAVA = 22;

    /**
     * Why a node with realms never runs over DiSNI: a queue pair is bound to its realm by the proof its connect
     * request carries in rdma_cm private data, which DiSNI 2.1 drops on the accepting side.
     */
    public static final String REALMS_NEED_PRIVATE_DATA = "verbs: realms (a secret per job) need rdma_cm private "
            + "data, which DiSNI 2.1 drops; use spark.shuffle.rdma.verbs.api=ffm on Java 22+";

    private static volatile Optional<String> deviceMissing;
    private static volatile Optional<String> disniMissing;
    private static volatile Optional<String> ffmMissing;
    private static volatile VerbsDeviceFactory ffm;

    private VerbsApis() {
    }

    /** The API a node uses, and why; or what is missing for {@code api}. */
    record Choice(VerbsDeviceFactory factory, String why) {
    }

    /** Empty when the verbs provider can run with {@code api}; otherwise what is missing and how to fix it. */
    public static Optional<String> missing(VerbsApi api) {
        return device().or(() -> apiMissing(api));
    }

    /**
     * Empty when rdma-core can be reached through {@code api} on this JVM, whether or not an RDMA device exists;
     * otherwise what is missing and how to fix it (what {@code doctor} reports as the Java version's verbs path).
     */
    public static Optional<String> apiMissing(VerbsApi api) {
        switch (api) {
            case FFM:
                return ffm().map(w -> "spark.shuffle.rdma.verbs.api=ffm, but " + w);
            case DISNI:
                return disni().map(w -> "spark.shuffle.rdma.verbs.api=disni, but " + w);
            case AUTO:
            default: {
                Optional<String> f = ffm();
                Optional<String> d = disni();
                if (f.isEmpty() || d.isEmpty()) {
                    return Optional.empty();
                }
                return Optional.of("neither verbs API can run: java.lang.foreign: " + f.get() + "; DiSNI: " + d.get());
            }
        }
    }

    /**
     * Empty when a node with realms can run through {@code api} (the one {@link #choose} would take carries
     * rdma_cm private data: java.lang.foreign); else {@link #REALMS_NEED_PRIVATE_DATA}. Ask when
     * {@link #missing} is empty.
     */
    public static Optional<String> realmsMissing(VerbsApi api) {
        boolean disni = api == VerbsApi.DISNI || (api != VerbsApi.FFM && ffm().isPresent());
        return disni ? Optional.of(REALMS_NEED_PRIVATE_DATA) : Optional.empty();
    }

    /** The factory for {@code api}; {@link #missing} must be empty for it. */
    static Choice choose(VerbsApi api) throws IOException {
        Optional<String> why = missing(api);
        if (why.isPresent()) {
            throw new IOException(why.get());
        }
        switch (api) {
            case FFM:
                return new Choice(ffm, "spark.shuffle.rdma.verbs.api=ffm");
            case DISNI:
                return new Choice(new DisniDeviceFactory(), "spark.shuffle.rdma.verbs.api=disni");
            case AUTO:
            default: {
                Optional<String> f = ffm();
                if (f.isEmpty()) {
                    return new Choice(ffm, "verbs.api=auto: Java " + Runtime.version().feature()
                            + " and rdma-core's libibverbs and librdmacm loaded");
                }
                return new Choice(new DisniDeviceFactory(), "verbs.api=auto: java.lang.foreign cannot run: " + f.get());
            }
        }
    }

    private static Optional<String> device() {
        Optional<String> m = deviceMissing;
        if (m == null) {
            Path devices = Path.of("/sys/class/infiniband");
            try (var s = Files.list(devices)) {
                m = s.findAny().isEmpty()
                        ? Optional.of("no RDMA device in " + devices + " (load an RDMA driver, e.g. siw or rxe)")
                        : Optional.empty();
            } catch (IOException e) {
                m = Optional.of("no RDMA device: " + devices + " does not exist (this kernel has no RDMA support)");
            }
            deviceMissing = m;
        }
        return m;
    }

    private static Optional<String> ffm() {
        Optional<String> m = ffmMissing;
        if (m == null) {
            m = probeFfm();
            ffmMissing = m;
        }
        return m;
    }

    private static Optional<String> probeFfm() {
        int feature = Runtime.version().feature();
        if (feature < FFM_JAVA) {
            return Optional.of("the foreign function API needs Java " + FFM_JAVA + "+ and this JVM is Java " + feature);
        }
        VerbsDeviceFactory f;
        try {
            f = (VerbsDeviceFactory) Class.forName(FFM_FACTORY, true, VerbsApis.class.getClassLoader())
                    .getDeclaredConstructor().newInstance();
        } catch (ClassNotFoundException e) {
            return Optional.of("this rdma-shuffle build has no Java " + FFM_JAVA + " classes (META-INF/versions/"
                    + FFM_JAVA + " of the jar; build with -Dffm.jdk=<a JDK " + FFM_JAVA + "+>)");
        } catch (ReflectiveOperationException | LinkageError | RuntimeException e) {
            return Optional.of("its classes do not load: " + e);
        }
        Optional<String> m = f.missing();
        if (m.isEmpty()) {
            ffm = f;
        }
        return m;
    }

    private static Optional<String> disni() {
        Optional<String> m = disniMissing;
        if (m == null) {
            m = probeDisni();
            disniMissing = m;
        }
        return m;
    }

    private static Optional<String> probeDisni() {
        try {
            Class.forName("com.ibm.disni.verbs.RdmaEventChannel", false, VerbsApis.class.getClassLoader());
        } catch (ClassNotFoundException | LinkageError e) {
            return Optional.of("DiSNI classes are not on the class path (use the shaded rdma-shuffle jar)");
        }
        String path = System.getProperty("java.library.path", "");
        for (String dir : path.split(File.pathSeparator)) {
            if (!dir.isEmpty() && Files.isRegularFile(Path.of(dir, System.mapLibraryName("disni")))) {
                return Optional.empty();
            }
        }
        return Optional.of("libdisni not found on java.library.path (" + path + "); build it from DiSNI's "
                + "source and pass -Djava.library.path=<dir> (executors: spark.executor.extraLibraryPath)");
    }

    /** DiSNI's factory; its classes load only when a node opens through it. */
    private static final class DisniDeviceFactory implements VerbsDeviceFactory {
        @Override
        public Optional<String> missing() {
            return disni();
        }

        @Override
        public String api() {
            return "DiSNI";
        }

        @Override
        public VerbsDevice open(VerbsNode node, InetSocketAddress bind, QueuePairParameters queuePairs, int credits,
                                int completionQueueSize, int eventTimeoutMs) throws IOException {
            return new DisniDevice(node, bind, queuePairs, credits, completionQueueSize, eventTimeoutMs);
        }
    }
}
