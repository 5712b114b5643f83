package org.rdmashuffle.transport.doctor;

import java.util.LinkedHashMap;
import java.util.Map;
import org.rdmashuffle.conf.ByteSizes;
import org.rdmashuffle.conf.RdmaShuffleConf;

/**
 * {@code doctor}'s command line, parsed and checked: the configuration the executors would run with
 * ({@code --conf}, {@code --provider}, {@code --bind} on top of the defaults), and what to run.
 *
 * @param conf the configuration
 * @param json whether to print one JSON object instead of text
 * @param outputs map outputs one executor is expected to keep registered
 * @param serve whether to serve the READ self-test
 * @param serveSeconds how long to serve; 0 until killed
 * @param peerHost the server to READ from, or null
 * @param peerPort its port
 * @param reads READs the peer side makes
 * @param sizeBytes bytes per READ
 * @param help whether only the usage text was asked for
 */
record DoctorOptions(RdmaShuffleConf conf, boolean json, long outputs, boolean serve, long serveSeconds,
                     String peerHost, int peerPort, int reads, int sizeBytes, boolean help) {
    static final long DEFAULT_OUTPUTS = 20_000;
    static final int DEFAULT_READS = 256;
    static final int DEFAULT_SIZE = 1 << 20;
    static final int MAX_SIZE = 16 << 20;

    static final String USAGE = String.join("\n",
            "usage: java -cp <plugin jar> org.rdmashuffle.transport.doctor.Doctor [options]",
            "Checks this host for the rdma-shuffle transport: RDMA devices and ports, rdma_cm, memlock,",
            "vm.max_map_count, the Java version's verbs path, the bind address, and whether the transport opens.",
            "  --conf key=value       a spark.shuffle.rdma.* setting the executors use (repeatable)",
            "  --provider P           auto, verbs or tcp (spark.shuffle.rdma.provider; default auto)",
            "  --bind A               an address or interface of this host (spark.shuffle.rdma.bindAddress)",
            "  --outputs N            map outputs one executor keeps registered (default " + DEFAULT_OUTPUTS + ")",
            "  --json                 print one JSON object instead of text",
            "  --serve                then serve a READ self-test region; prints",
            "                         'doctor: serving READ self-test at <provider>://<host>:<port>'",
            "    --port P             its port (default spark.shuffle.rdma.port; 0 picks a free one)",
            "    --serve-seconds S    stop after S seconds (default: until killed)",
            "  --peer host:port       then READ from a doctor --serve there and verify every byte",
            "    --reads N            READs to make (default " + DEFAULT_READS + ")",
            "    --size BYTES         bytes per READ, a multiple of 8 up to 16m (default 1m)",
            "Exit status: 0 when no check FAILs, 1 when one does, 2 on bad usage.");

    /** A command line that cannot run; {@code doctor} prints it with the usage text and exits with status 2. */
    static final class UsageException extends Exception {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    static DoctorOptions parse(String... args) throws UsageException {
        Map<String, String> settings = new LinkedHashMap<>();
        boolean json = false;
        boolean serve = false;
        boolean help = false;
        long outputs = DEFAULT_OUTPUTS;
        long serveSeconds = 0;
        String port = null;
        String peer = null;
        Integer reads = null;
        Integer size = null;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            switch (a) {
                case "--json" -> json = true;
                case "--serve" -> serve = true;
                case "-h", "--help" -> help = true;
                case "--conf" -> {
                    String kv = argument(args, ++i, a);
                    int eq = kv.indexOf('=');
                    if (eq <= 0) {
                        throw new UsageException("--conf takes key=value, not '" + kv + "'");
                    }
                    String key = kv.substring(0, eq).trim();
                    if (!key.startsWith(RdmaShuffleConf.PREFIX)) {
                        throw new UsageException("--conf takes " + RdmaShuffleConf.PREFIX + "* keys, not '" + key + "'");
                    }
                    settings.put(key, kv.substring(eq + 1).trim());
                }
                case "--provider" -> settings.put(RdmaShuffleConf.PROVIDER.name(), argument(args, ++i, a));
                case "--bind" -> settings.put(RdmaShuffleConf.BIND_ADDRESS.name(), argument(args, ++i, a));
                case "--outputs" -> outputs = number(argument(args, ++i, a), a, 0, 1L << 31);
                case "--port" -> port = Long.toString(number(argument(args, ++i, a), a, 0, 65535));
                case "--serve-seconds" -> serveSeconds = number(argument(args, ++i, a), a, 0, 365L * 86400);
                case "--peer" -> peer = argument(args, ++i, a);
                case "--reads" -> reads = (int) number(argument(args, ++i, a), a, 1, 1 << 24);
                case "--size" -> size = size(argument(args, ++i, a));
                default -> throw new UsageException("unknown argument '" + a + "'");
            }
        }
        if (serve && peer != null) {
            throw new UsageException("--serve and --peer run on different hosts: give one of them");
        }
        if (!serve && (port != null || serveSeconds != 0)) {
            throw new UsageException("--port and --serve-seconds go with --serve");
        }
        if (peer == null && (reads != null || size != null)) {
            throw new UsageException("--reads and --size go with --peer");
        }
        if (port != null) {
            settings.put(RdmaShuffleConf.PORT.name(), port);
        }
        String peerHost = null;
        int peerPort = 0;
        if (peer != null) {
            String hp = peer.contains("://") ? peer.substring(peer.indexOf("://") + 3) : peer;
            int colon = hp.lastIndexOf(':');
            if (colon <= 0) {
                throw new UsageException("--peer takes host:port, not '" + peer + "'");
            }
            peerHost = hp.substring(0, colon);
            if (peerHost.startsWith("[") && peerHost.endsWith("]")) {
                peerHost = peerHost.substring(1, peerHost.length() - 1);
            }
            peerPort = (int) number(hp.substring(colon + 1), "--peer's port", 1, 65535);
        }
        RdmaShuffleConf conf;
        try {
            conf = new RdmaShuffleConf(settings);
        } catch (IllegalArgumentException e) {
            throw new UsageException(e.getMessage());
        }
        return new DoctorOptions(conf, json, outputs, serve, serveSeconds, peerHost, peerPort,
                reads == null ? DEFAULT_READS : reads, size == null ? DEFAULT_SIZE : size, help);
    }

    private static String argument(String[] args, int i, String option) throws UsageException {
        if (i >= args.length) {
            throw new UsageException(option + " needs a value");
        }
        return args[i];
    }

    private static long number(String s, String option, long min, long max) throws UsageException {
        try {
            long n = Long.parseLong(s.trim());
            if (n < min || n > max) {
                throw new UsageException(option + " " + s + " is out of range [" + min + ", " + max + "]");
            }
            return n;
        } catch (NumberFormatException e) {
            throw new UsageException(option + " takes a number, not '" + s + "'");
        }
    }

    private static int size(String s) throws UsageException {
        long n;
        try {
            n = ByteSizes.parse(s);
        } catch (IllegalArgumentException e) {
            throw new UsageException("--size " + s + ": " + e.getMessage());
        }
        if (n < 8 || n > MAX_SIZE || n % 8 != 0) {
            throw new UsageException("--size " + s + " must be a multiple of 8 from 8 bytes to 16m");
        }
        return (int) n;
    }
}
