package org.rdmashuffle.transport.doctor;

import java.io.File;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.stream.Stream;

/**
 * {@code doctor}, the pre-flight check of a host for the rdma-shuffle transport:
 * {@code java -cp <plugin jar> org.rdmashuffle.transport.doctor.Doctor [--conf key=value]... [--json]
 * [--bind <address|interface>] [--provider auto|verbs|tcp] [--outputs N] [--serve [--port P] [--serve-seconds S]]
 * [--peer host:port [--reads N] [--size BYTES]]}. Prints one line per check (PASS, WARN, FAIL, SKIP, with the fix
 * in one line) and a summary; exits 0 when no check FAILs, 1 when one does, 2 on bad usage.
 *
 * <p>The plugin jar leaves SLF4J to the engine (Spark and Hadoop ship it). When it is not on the class path, this
 * class looks for {@code slf4j-api} in {@code $SPARK_HOME/jars}, {@code $HADOOP_HOME/share/hadoop/common/lib} and
 * beside the jar, and runs {@code doctor} in a class loader with the class path and that jar; this class itself
 * uses no SLF4J.
 */
public final class Doctor {
    private static final String SLF4J = "org.slf4j.LoggerFactory";

    private Doctor() {
    }

    public static void main(String[] args) throws Exception {
        System.exit(run(args, System.out, System.err));
    }

    private static int run(String[] args, PrintStream out, PrintStream err) throws Exception {
        if (present(SLF4J, Doctor.class.getClassLoader())) {
            return DoctorCommand.run(args, out, err);
        }
        try {
            if (DoctorOptions.parse(args).help()) {   // the command line first: usage needs no SLF4J
                out.println(DoctorOptions.USAGE);
                return 0;
            }
        } catch (DoctorOptions.UsageException e) {
            err.println("doctor: " + e.getMessage());
            err.println(DoctorOptions.USAGE);
            return DoctorCommand.USAGE;
        }
        Path self = Path.of(Doctor.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        Optional<Path> slf4j = findSlf4j(self);
        if (slf4j.isEmpty()) {
            err.println("doctor: SLF4J is not on the class path and no slf4j-api jar was found in $SPARK_HOME/jars, "
                    + "$HADOOP_HOME/share/hadoop/common/lib or beside " + self + "; run it as java -cp '" + self
                    + File.pathSeparator + "$SPARK_HOME/jars/*' " + Doctor.class.getName());
            return DoctorCommand.USAGE;
        }
        List<URL> urls = new ArrayList<>();
        for (String entry : System.getProperty("java.class.path", self.toString()).split(File.pathSeparator)) {
            if (!entry.isEmpty()) {
                urls.add(Path.of(entry).toUri().toURL());
            }
        }
        urls.add(slf4j.get().toUri().toURL());
        try (URLClassLoader loader = new URLClassLoader(urls.toArray(URL[]::new), ClassLoader.getPlatformClassLoader())) {
            Method m = loader.loadClass(Doctor.class.getPackageName() + ".DoctorCommand")
                    .getDeclaredMethod("run", String[].class, PrintStream.class, PrintStream.class);
            m.setAccessible(true);
            return (Integer) m.invoke(null, args, out, err);
        }
    }

    private static boolean present(String name, ClassLoader loader) {
        try {
            Class.forName(name, false, loader);
            return true;
        } catch (ClassNotFoundException | LinkageError e) {
            return false;
        }
    }

    private static Optional<Path> findSlf4j(Path self) {
        List<Path> dirs = new ArrayList<>();
        String spark = System.getenv("SPARK_HOME");
        if (spark != null) {
            dirs.add(Path.of(spark, "jars"));
        }
        String hadoop = System.getenv("HADOOP_HOME");
        if (hadoop != null) {
            dirs.add(Path.of(hadoop, "share", "hadoop", "common", "lib"));
        }
        if (self.getParent() != null) {
            dirs.add(self.getParent());
        }
        for (Path dir : dirs) {
            try (Stream<Path> s = Files.list(dir)) {
                Optional<Path> jar = s.filter(p -> p.getFileName().toString().matches("slf4j-api-[0-9.]+\\.jar"))
                        .sorted().reduce((a, b) -> b);
                if (jar.isPresent()) {
                    return jar;
                }
            } catch (java.io.IOException e) {
                // not there: the next place
            }
        }
        return Optional.empty();
    }
}
