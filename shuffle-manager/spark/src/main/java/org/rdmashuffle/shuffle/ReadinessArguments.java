package org.rdmashuffle.shuffle;

/**
 * The readiness job's command line:
 * {@code [--mib N] [--reads N] [--executors N] [--wait-seconds S] [--stage-seconds S]}.
 *
 * @param regionMiB MiB each executor registers for the others to READ (the READs cycle through it), at most
 *        {@link #MAX_MIB}: direct memory and locked memory on top of the executor's pool
 * @param reads READs of 1 MiB each executor makes from every other
 * @param executors executors to wait for; 0: as many as the cluster says it starts
 *        ({@code spark.executor.instances}, a local cluster's count, dynamic allocation's initial count)
 * @param waitSeconds how long to wait for them to register
 * @param stageSeconds how long each stage (register, READ, deregister) may take before its job is cancelled
 *        and the stage counts as failed (e.g. an executor lost mid-stage that is not replaced)
 * @param help whether only the usage was asked for
 */
record ReadinessArguments(int regionMiB, int reads, int executors, int waitSeconds, int stageSeconds,
                          boolean help) {
    /** The largest region: 1 GiB, a ByteBuffer's size in int bytes with room to spare. */
    static final int MAX_MIB = 1024;
    static final String USAGE = "usage: spark-submit --class " + ReadinessCheck.class.getName()
            + " <plugin jar> [--mib N] [--reads N] [--executors N] [--wait-seconds S]"
            + " [--stage-seconds S]\n"
            + "  --mib N           MiB each executor registers for the others to READ (default 16, 1.." + MAX_MIB
            + "):\n"
            + "                    direct memory and locked memory on top of the executor's pool\n"
            + "  --reads N         READs of 1 MiB from every other executor, one at a time (default 64, 1..100000)\n"
            + "  --executors N     executors to wait for (default: spark.executor.instances, or what the cluster"
            + " starts)\n"
            + "  --wait-seconds S  how long to wait for them to register (default 120)\n"
            + "  --stage-seconds S how long each stage (register, READ, deregister) may take before it is"
            + " cancelled as failed (default 300)\n"
            + "exit status: 0 every pair OK; 1 a pair failed, a stage ran out of time, an executor has no"
            + " rdma-shuffle node, or one runs tcp under provider=verbs with fallback=never; 2 bad usage";

    static final int DEFAULT_MIB = 16;
    static final int DEFAULT_READS = 64;
    static final int DEFAULT_WAIT_SECONDS = 120;
    static final int DEFAULT_STAGE_SECONDS = 300;

    ReadinessArguments {
        check("--mib", regionMiB, 1, MAX_MIB);
        check("--reads", reads, 1, 100_000);
        check("--executors", executors, 0, 100_000);
        check("--wait-seconds", waitSeconds, 1, 86_400);
        check("--stage-seconds", stageSeconds, 1, 86_400);
    }

    /** {@code mib} MiB in bytes, exactly (ArithmeticException rather than a wrapped size). */
    static int bytesOf(int mib) {
        return Math.toIntExact(Math.multiplyExact((long) mib, 1L << 20));
    }

    static ReadinessArguments defaults() {
        return new ReadinessArguments(DEFAULT_MIB, DEFAULT_READS, 0, DEFAULT_WAIT_SECONDS, DEFAULT_STAGE_SECONDS,
                false);
    }

    /**
     * Reads {@code args}.
     *
     * @throws IllegalArgumentException naming the option at fault (the caller prints it with {@link #USAGE}
     *     and exits with 2)
     */
    static ReadinessArguments parse(String... args) {
        int mib = DEFAULT_MIB;
        int reads = DEFAULT_READS;
        int executors = 0;
        int wait = DEFAULT_WAIT_SECONDS;
        int stage = DEFAULT_STAGE_SECONDS;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            switch (a) {
                case "--help", "-h" -> {
                    return new ReadinessArguments(mib, reads, executors, wait, stage, true);
                }
                case "--mib" -> mib = number(args, ++i, a);
                case "--reads" -> reads = number(args, ++i, a);
                case "--executors" -> executors = number(args, ++i, a);
                case "--wait-seconds" -> wait = number(args, ++i, a);
                case "--stage-seconds" -> stage = number(args, ++i, a);
                default -> throw new IllegalArgumentException("unknown argument '" + a + "'");
            }
        }
        return new ReadinessArguments(mib, reads, executors, wait, stage, false);
    }

    private static int number(String[] args, int i, String option) {
        if (i >= args.length) {
            throw new IllegalArgumentException(option + " needs a number");
        }
        try {
            return Integer.parseInt(args[i].trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(option + " needs a number, not '" + args[i] + "'", e);
        }
    }

    private static void check(String option, int value, int min, int max) {
        if (value < min || value > max) {
            throw new IllegalArgumentException(option + " " + value + " is out of range; accepted: " + min + ".."
                    + max);
        }
    }
}
