package org.rdmashuffle.transport;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Queue;
import java.util.concurrent.CompletableFuture;
import java.util.function.UnaryOperator;

/**
 * Tests: a control handler that answers the message {@code later} only when the test completes the future it
 * put in {@code later}, and every other message at once with {@code now}.
 */
public final class LaterReplies {
    private LaterReplies() {
    }

    public static ControlHandler handler(Queue<CompletableFuture<ByteBuffer>> later, UnaryOperator<ByteBuffer> now) {
        return new ControlHandler() {
            @Override
            public ByteBuffer onMessage(ByteBuffer request) {
                return now.apply(request);
            }

            @Override
            public CompletableFuture<ByteBuffer> onMessageAsync(String realm, ByteBuffer request) {
                if (!StandardCharsets.UTF_8.decode(request.duplicate()).toString().equals("later")) {
                    return ControlHandler.super.onMessageAsync(realm, request);
                }
                CompletableFuture<ByteBuffer> f = new CompletableFuture<>();
                later.add(f);
                return f;
            }
        };
    }
}
