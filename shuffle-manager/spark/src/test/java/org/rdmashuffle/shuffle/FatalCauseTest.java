package org.rdmashuffle.shuffle;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.shuffle.core.serve.MapOutputServer;

/**
 * A map output that cannot be registered under {@code fallback=never} fails its map task — but
 * never with an {@link Error} in the failure's cause chain, which Spark takes as fatal and ends the
 * executor with (a failed mapping carries the {@code OutOfMemoryError} of {@code vm.max_map_count}).
 */
class FatalCauseTest {
    @Test
    void shouldKeepTheMessagesButNoErrorOfAFailedMappingsCauseChain() {
        IOException mapFailed = new IOException("Map failed", new OutOfMemoryError("Map failed"));
        Throwable t = MapOutputServer.withoutErrors(mapFailed);
        for (Throwable c = t; c != null; c = c.getCause()) {
            assertFalse(c instanceof Error, "an error left in the chain: " + c);
        }
        assertTrue(t.getMessage().contains("java.io.IOException: Map failed"), t.getMessage());
        assertTrue(t.getMessage().contains("java.lang.OutOfMemoryError: Map failed"), t.getMessage());
    }

    @Test
    void shouldPassACauseWithoutErrorsAsItIs() {
        IOException refused = new IOException("verbs: registering 4096 bytes failed");
        assertSame(refused, MapOutputServer.withoutErrors(refused));
        assertSame(null, MapOutputServer.withoutErrors(null));
    }
}
