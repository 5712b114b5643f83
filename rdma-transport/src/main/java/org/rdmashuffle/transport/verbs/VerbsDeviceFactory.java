package org.rdmashuffle.transport.verbs;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.Optional;

/** Opens a {@link VerbsDevice} through one API, and says what that API lacks on this machine. */
interface VerbsDeviceFactory {
    /** Empty when this API can run here (a device may still be missing); otherwise what is missing. */
    Optional<String> missing();

    /** Which API, for log lines ({@code java.lang.foreign}, {@code DiSNI}). */
    String api();

    VerbsDevice open(VerbsNode node, InetSocketAddress bind, QueuePairParameters queuePairs, int credits,
                     int completionQueueSize, int eventTimeoutMs) throws IOException;
}
