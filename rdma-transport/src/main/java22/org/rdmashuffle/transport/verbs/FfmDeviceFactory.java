package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Opens {@link FfmDevice}s: libibverbs and librdmacm through {@code java.lang.foreign}. Loaded by name
 * from {@link VerbsApis} on Java 22+ only (this class is in the jar's {@code META-INF/versions/22}).
 */
public final class FfmDeviceFactory implements VerbsDeviceFactory {
    private static final Logger LOG = LoggerFactory.getLogger(FfmDeviceFactory.class);
    private static final AtomicBoolean WARNED = new AtomicBoolean();

    public FfmDeviceFactory() {
    }

    @Override
    public Optional<String> missing() {
        try {
            RdmaCore.get();
        } catch (UnsatisfiedLinkError e) {
            return Optional.of(e.getMessage());
        } catch (IllegalCallerException e) {
            return Optional.of("the JVM denies rdma-shuffle native access (" + e.getMessage() + "): start it with "
                    + "--enable-native-access=ALL-UNNAMED (Spark: spark.driver.extraJavaOptions and "
                    + "spark.executor.extraJavaOptions)");
        }
        if (!FfmDeviceFactory.class.getModule().isNativeAccessEnabled() && WARNED.compareAndSet(false, true)) {
            LOG.warn("verbs through java.lang.foreign: native access is not enabled for rdma-shuffle, so Java warns "
                    + "on its first native call and a later Java release will refuse it: start the JVM with "
                    + "--enable-native-access=ALL-UNNAMED (Spark: spark.driver.extraJavaOptions and "
                    + "spark.executor.extraJavaOptions)");
        }
        return Optional.empty();
    }

    @Override
    public String api() {
        return "java.lang.foreign";
    }

    @Override
    public VerbsDevice open(VerbsNode node, InetSocketAddress bind, QueuePairParameters queuePairs, int credits,
                            int completionQueueSize, int eventTimeoutMs) throws IOException {
        return new FfmDevice(node, RdmaCore.get(), bind, queuePairs, credits, completionQueueSize, eventTimeoutMs);
    }
}
