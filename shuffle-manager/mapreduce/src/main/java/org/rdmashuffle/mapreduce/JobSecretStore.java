package org.rdmashuffle.mapreduce;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Set;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The jobs a NodeManager's service knows, kept on its local disk while NodeManager recovery is on
 * ({@code yarn.nodemanager.recovery.enabled}: YARN then gives the service a recovery path), so that a restarted
 * service knows the jobs still running at once, not only when a job's next container starts on the NodeManager —
 * as Hadoop's {@code ShuffleHandler} keeps its job tokens.
 *
 * <p>One file per application, named by its id, in a directory only the NodeManager's user may enter (0700); each
 * file (0600) holds a version line, the job's user and its shuffle secret (Base64). A file is written to a
 * temporary name, forced to disk, and moved in place (the directory then forced too), so a crash leaves the old
 * file or the new one. Nothing here throws at the
 * NodeManager: a file that cannot be written or removed is a WARN (the job is then known again from its next
 * container only), and one that cannot be read back is a WARN and skipped.
 */
final class JobSecretStore {
    private static final Logger LOG = LoggerFactory.getLogger(JobSecretStore.class);
    /** The directory under the service's recovery path. */
    static final String DIR_NAME = "rdma-shuffle-jobs";
    private static final String VERSION = "rdma-shuffle job secret v1";
    private static final Set<PosixFilePermission> DIR_MODE = PosixFilePermissions.fromString("rwx------");
    private static final Set<PosixFilePermission> FILE_MODE = PosixFilePermissions.fromString("rw-------");
    /** A secret file larger than this is not one (a secret is tens of bytes). */
    private static final long MAX_FILE_BYTES = 16 << 10;

    /** A job read back: its application, user and shuffle secret. */
    record Entry(ApplicationId app, String user, byte[] secret) {
    }

    private final Path dir;

    private JobSecretStore(Path dir) {
        this.dir = dir;
    }

    /** The store under {@code recoveryPath}, its directory created (0700) or set so if it exists. */
    static JobSecretStore under(Path recoveryPath) throws IOException {
        Path dir = recoveryPath.resolve(DIR_NAME);
        if (Files.isSymbolicLink(dir)) {
            throw new IOException(dir + " is a symbolic link");
        }
        Files.createDirectories(dir, PosixFilePermissions.asFileAttribute(DIR_MODE));
        Files.setPosixFilePermissions(dir, DIR_MODE);
        return new JobSecretStore(dir);
    }

    Path dir() {
        return dir;
    }

    /** Keeps {@code app}'s user and secret (replacing what was kept); a failure is a WARN. */
    void save(ApplicationId app, String user, byte[] secret) {
        Path file = dir.resolve(app.toString());
        Path tmp = dir.resolve("." + app + ".tmp");
        String text = VERSION + "\n" + user + "\n" + Base64.getEncoder().encodeToString(secret) + "\n";
        try {
            Files.deleteIfExists(tmp);
            Files.createFile(tmp, PosixFilePermissions.asFileAttribute(FILE_MODE));
            try (FileChannel out = FileChannel.open(tmp, StandardOpenOption.WRITE)) {
                ByteBuffer bytes = ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8));
                while (bytes.hasRemaining()) {
                    out.write(bytes);
                }
                out.force(true); // on disk before the move names it: a crash leaves no empty entry
            }
            try {
                Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING);
            }
            syncDirectory();
        } catch (IOException | RuntimeException e) {
            LOG.warn("rdma-shuffle: cannot keep the job secret of {} in {} ({}): after a restart of the service the"
                    + " job is known again from its next container on this NodeManager only", app, dir, e.toString());
            try {
                Files.deleteIfExists(tmp);
            } catch (IOException ignored) {
                // the WARN above said it
            }
        }
    }

    /**
     * Forces the directory's entries (the move just made) to disk where the platform can (Linux); elsewhere the
     * move is on disk when the file system puts it there.
     */
    private void syncDirectory() {
        try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
            d.force(true);
        } catch (IOException | RuntimeException e) {
            LOG.debug("rdma-shuffle: cannot force the directory {} to disk: {}", dir, e.toString());
        }
    }

    /** Forgets {@code app} (its file removed); a failure is a WARN. */
    void remove(ApplicationId app) {
        try {
            Files.deleteIfExists(dir.resolve(app.toString()));
        } catch (IOException e) {
            LOG.warn("rdma-shuffle: cannot remove the job secret of {} from {}: {}", app, dir, e.toString());
        }
    }

    /** Every job kept; a file that is not one (bad name, version, user or secret; a link; unreadable) is a WARN. */
    List<Entry> load() {
        List<Entry> jobs = new ArrayList<>();
        try (DirectoryStream<Path> files = Files.newDirectoryStream(dir)) {
            for (Path f : files) {
                String name = f.getFileName().toString();
                if (name.startsWith(".")) {
                    continue; // a write that did not finish
                }
                try {
                    jobs.add(read(f, name));
                } catch (IOException | RuntimeException e) {
                    LOG.warn("rdma-shuffle: {} is no job secret this service kept ({}): skipped", f, e.toString());
                }
            }
        } catch (IOException e) {
            LOG.warn("rdma-shuffle: cannot list the job secrets in {} ({}): running jobs are known again from their"
                    + " next containers on this NodeManager only", dir, e.toString());
        }
        return jobs;
    }

    private static Entry read(Path f, String name) throws IOException {
        if (!Files.isRegularFile(f, LinkOption.NOFOLLOW_LINKS)) {
            throw new IOException("not a plain file");
        }
        if (Files.size(f) > MAX_FILE_BYTES) {
            throw new IOException("larger than " + MAX_FILE_BYTES + " bytes");
        }
        ApplicationId app = ApplicationId.fromString(name);
        List<String> lines = Files.readAllLines(f, StandardCharsets.UTF_8);
        if (lines.size() != 3 || !VERSION.equals(lines.get(0))) {
            throw new IOException("not " + VERSION);
        }
        String user = lines.get(1);
        byte[] secret = Base64.getDecoder().decode(lines.get(2));
        if (user.isEmpty() || secret.length == 0) {
            throw new IOException("no user or no secret");
        }
        return new Entry(app, user, secret);
    }
}
