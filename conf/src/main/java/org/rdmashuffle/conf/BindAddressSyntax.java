package org.rdmashuffle.conf;

import java.util.regex.Pattern;

/**
 * The form of a {@code bindAddress} value, checked when the configuration is read: empty, an IP address
 * literal, or something that can be an interface name. Whether that address or interface is on this host is
 * checked where the node starts (the transport's {@code BindAddress}), since the driver's configuration is
 * read on hosts that are not the executor's.
 */
final class BindAddressSyntax {
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9_.:@-]{1,64}");

    private BindAddressSyntax() {
    }

    static String check(String raw) {
        String v = raw.trim();
        if (!v.isEmpty() && !NAME.matcher(v).matches()) {
            throw new IllegalArgumentException("not an IP address or interface name");
        }
        return v;
    }
}
