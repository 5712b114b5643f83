package org.rdmashuffle.transport.doctor;

import java.io.IOException;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.rdmashuffle.transport.VerbsSupport;

/**
 * One {@code doctor} run: parses the command line, runs the checks of this host (and the READ self-test's
 * serving or reading side when asked), prints them, and says the exit status.
 */
final class DoctorCommand {
    /** Exit status of a command line that cannot run. */
    static final int USAGE = 2;

    private final PrintStream out;
    private final PrintStream err;
    private final List<Check> checks = new ArrayList<>();
    private int printed;

    private DoctorCommand(PrintStream out, PrintStream err) {
        this.out = out;
        this.err = err;
    }

    /** Runs {@code doctor} on this host; returns the exit status. */
    static int run(String[] args, PrintStream out, PrintStream err) {
        return run(args, out, err, HostPaths.real());
    }

    static int run(String[] args, PrintStream out, PrintStream err, HostPaths paths) {
        DoctorOptions options;
        try {
            options = DoctorOptions.parse(args);
        } catch (DoctorOptions.UsageException e) {
            err.println("doctor: " + e.getMessage());
            err.println(DoctorOptions.USAGE);
            return USAGE;
        }
        if (options.help()) {
            out.println(DoctorOptions.USAGE);
            return 0;
        }
        return new DoctorCommand(out, err).run(options, paths);
    }

    private int run(DoctorOptions o, HostPaths paths) {
        HostContext host = new HostContext(paths, o.conf(), VerbsSupport.missing(o.conf().verbsApi()));
        RdmaDeviceChecks.run(host).forEach(this::add);
        add(HostLimitChecks.rdmaCm(host));
        add(HostLimitChecks.memlock(host));
        add(HostLimitChecks.maxMapCount(host, o.outputs()));
        add(RuntimeChecks.java(o.conf()));
        add(RuntimeChecks.bind(o.conf().bindAddress()));
        add(RuntimeChecks.transport(o.conf(), o.conf().bindAddress()));
        SelfTestResult measured = null;
        if (o.serve()) {
            serve(o);
        } else if (o.peerHost() != null) {
            String bindHost = RuntimeChecks.bindHost(o.conf().bindAddress());
            if (bindHost == null) {
                add(Check.skip(SelfTestPeer.CONNECT, "no node opened: the bind address names nothing on this host"));
            } else {
                SelfTestPeer.Outcome outcome = SelfTestPeer.run(o.conf(), bindHost, o.peerHost(), o.peerPort(),
                        o.reads(), o.sizeBytes());
                outcome.checks().forEach(this::add);
                measured = outcome.result();
            }
        }
        Report report = new Report(hostName(), o.conf().provider().name().toLowerCase(), checks, measured);
        if (o.json()) {
            out.println(JsonReport.render(report));
        } else {
            flushLines();
            out.println(TextReport.summary(report));
        }
        out.flush();
        return report.exitStatus();
    }

    private void serve(DoctorOptions o) {
        String name = "self-test serve";
        String bindHost = RuntimeChecks.bindHost(o.conf().bindAddress());
        if (bindHost == null) {
            add(Check.skip(name, "nothing served: the bind address names nothing on this host"));
            return;
        }
        try (SelfTestServer server = SelfTestServer.start(o.conf(), bindHost)) {
            if (!o.json()) {
                flushLines();
            }
            PrintStream line = o.json() ? err : out;
            line.println("doctor: serving READ self-test at " + server.address());
            line.flush();
            CountDownLatch never = new CountDownLatch(1);
            if (o.serveSeconds() > 0) {
                never.await(o.serveSeconds(), TimeUnit.SECONDS);
            } else {
                never.await();
            }
            add(Check.pass(name, "served a " + (SelfTestServer.REGION_BYTES >> 20) + " MiB region for "
                    + o.serveSeconds() + " s at " + server.address() + " through " + server.choice().describe()
                    + " (READs served: " + server.readsServed() + "; verbs READs never reach the server's CPU)"));
        } catch (IOException | RuntimeException e) {
            add(Check.of(name, Check.Status.FAIL, "cannot serve on " + bindHost + ": " + e.getMessage(),
                    "fix the transport check above; a taken --port: pick another"));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            add(Check.skip(name, "interrupted"));
        }
    }

    private void add(Check c) {
        checks.add(c);
    }

    private void flushLines() {
        for (; printed < checks.size(); printed++) {
            out.println(TextReport.line(checks.get(printed)));
        }
        out.flush();
    }

    private static String hostName() {
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (UnknownHostException e) {
            return "localhost";
        }
    }
}
