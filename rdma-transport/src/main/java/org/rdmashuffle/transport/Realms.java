package org.rdmashuffle.transport;

import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * What a realm name may be: a non-empty string of at most {@link #MAX_BYTES} bytes in UTF-8 (a job id
 * fits many times over). A realm is an identifier, not a secret: it crosses the wire in the clear.
 */
public final class Realms {
    /** The longest realm name, in UTF-8 bytes. */
    public static final int MAX_BYTES = 128;

    private Realms() {
    }

    /**
     * The realm's UTF-8 bytes.
     *
     * @throws IllegalArgumentException when it is empty, longer than {@link #MAX_BYTES} bytes, or not
     *         encodable (an unpaired surrogate)
     */
    public static byte[] requireValid(String realm) {
        if (realm.isEmpty()) {
            throw new IllegalArgumentException("realm is empty");
        }
        java.nio.ByteBuffer encoded;
        try {
            encoded = StandardCharsets.UTF_8.newEncoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT).encode(CharBuffer.wrap(realm));
        } catch (CharacterCodingException e) {
            throw new IllegalArgumentException("realm is not valid Unicode: " + printable(realm), e);
        }
        if (encoded.remaining() > MAX_BYTES) {
            throw new IllegalArgumentException("realm " + printable(realm) + " has " + encoded.remaining()
                    + " bytes in UTF-8; at most " + MAX_BYTES);
        }
        byte[] b = new byte[encoded.remaining()];
        encoded.get(b);
        return b;
    }

    /** {@code realm} for a log line or message: control characters escaped, since a peer chose it. */
    public static String printable(String realm) {
        if (realm == null) {
            return "(none)";
        }
        StringBuilder sb = new StringBuilder(realm.length());
        for (int i = 0; i < realm.length(); i++) {
            char c = realm.charAt(i);
            if (Character.isISOControl(c)) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.toString();
    }
}
