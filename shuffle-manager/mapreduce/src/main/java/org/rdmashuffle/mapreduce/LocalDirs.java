package org.rdmashuffle.mapreduce;

import java.io.File;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.SeekableByteChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.OpenOption;
import java.nio.file.SecureDirectoryStream;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFileAttributeView;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.yarn.server.api.AuxiliaryLocalPathHandler;

/**
 * Where one NodeManager keeps what its containers wrote: {@code <local-dir>/usercache/<user>/appcache/<appId>/},
 * map outputs under {@code output/<attemptId>/file.out(.index)}.
 * Asks the NodeManager's {@link AuxiliaryLocalPathHandler} (which knows the good disks) when it has one, else
 * the directories of {@code yarn.nodemanager.local-dirs}.
 *
 * <p>Paths are only ever built from ids the NodeManager gave (an application it ran a container of) and ids
 * parsed into Hadoop's types, never from a peer's raw string.
 *
 * <p>What the service reads or maps it opens with {@link #openPlainFiles}: from the local dir down, each directory
 * opened relative to the one before with no link followed, the files relative to the last one — so what is opened
 * is what was checked, whatever a task swaps in its directories meanwhile.
 */
final class LocalDirs {
    private final AuxiliaryLocalPathHandler handler;
    private final List<File> configured;

    LocalDirs(AuxiliaryLocalPathHandler handler, Configuration conf) {
        this.handler = handler;
        List<File> dirs = new ArrayList<>();
        for (String d : conf.getTrimmedStrings(MapReduceRdmaConf.NM_LOCAL_DIRS)) {
            dirs.add(new File(new Path(d).toUri().getPath()));
        }
        this.configured = List.copyOf(dirs);
    }

    /** {@code usercache/<user>/appcache/<appId>} relative to a local dir. */
    static String appBase(String user, String appId) {
        return "usercache/" + user + "/appcache/" + appId;
    }

    /** The existing file at {@code relative} under one of the local dirs, or null. */
    File find(String relative) {
        if (handler != null) {
            try {
                Path p = handler.getLocalPathForRead(relative);
                if (p != null) {
                    File f = new File(p.toUri().getPath());
                    if (f.exists() && noLinksBelowLocalDir(f, relative)) {
                        return f;
                    }
                }
            } catch (IOException e) {
                // not on a good disk the handler knows: look at the configured ones too
            }
        }
        for (File dir : configured) {
            File f = new File(dir, relative);
            if (f.exists() && noLinksBelowLocalDir(f, relative)) {
                return f;
            }
        }
        return null;
    }

    /** Every existing directory {@code relative} names under the local dirs. */
    List<File> findAll(String relative) {
        List<File> found = new ArrayList<>();
        if (handler != null) {
            try {
                for (Path p : handler.getAllLocalPathsForRead(relative)) {
                    File f = new File(p.toUri().getPath());
                    if (f.isDirectory() && noLinksBelowLocalDir(f, relative) && !found.contains(f)) {
                        found.add(f);
                    }
                }
            } catch (IOException e) {
                // fall through to the configured dirs
            }
        }
        for (File dir : configured) {
            File f = new File(dir, relative);
            if (f.isDirectory() && noLinksBelowLocalDir(f, relative) && !found.contains(f)) {
                found.add(f);
            }
        }
        return found;
    }

    /**
     * Whether {@code f}, which is {@code relative} under a local dir, is reached from that local dir through
     * directories only: no component of {@code relative} is a symbolic link (none is followed), and every one but
     * the last is a directory. The local dir itself may be a link (an administrator's choice); what containers
     * write below it may not, so a task cannot point a map output's path at a file elsewhere through a linked
     * directory. A check by path, for finding files: what is read or mapped is opened with {@link #openPlainFiles}.
     */
    static boolean noLinksBelowLocalDir(File f, String relative) {
        java.nio.file.Path path = f.toPath();
        java.nio.file.Path rel = java.nio.file.Paths.get(relative).normalize();
        if (rel.isAbsolute() || rel.startsWith("..") || !path.endsWith(rel)) {
            return false;
        }
        java.nio.file.Path at = path;
        for (int i = 0; i < rel.getNameCount(); i++) {
            at = at.getParent();
        }
        for (int i = 0; i < rel.getNameCount(); i++) {
            at = at.resolve(rel.getName(i));
            try {
                BasicFileAttributes a = Files.readAttributes(at, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
                if (a.isSymbolicLink() || (i < rel.getNameCount() - 1 && !a.isDirectory())) {
                    return false;
                }
            } catch (IOException e) {
                return false;
            }
        }
        return true;
    }

    /** The length of {@code f} if it is a plain file (a symbolic link is not followed), else -1. */
    static long plainFileLength(File f) {
        try {
            BasicFileAttributes a = Files.readAttributes(f.toPath(), BasicFileAttributes.class,
                    LinkOption.NOFOLLOW_LINKS);
            return a.isRegularFile() ? a.size() : -1;
        } catch (IOException e) {
            return -1;
        }
    }

    /** This JVM cannot open a directory's entries relative to it ({@link SecureDirectoryStream}: Linux has it). */
    static final class NoSecureOpen extends IOException {
        private static final long serialVersionUID = 1L;

        NoSecureOpen(String message) {
            super(message);
        }
    }

    /** Files opened by {@link #openPlainFiles}, closed together (what was mapped from them stays mapped). */
    static final class OpenedFiles implements AutoCloseable {
        private final FileChannel[] channels;

        private OpenedFiles(FileChannel[] channels) {
            this.channels = channels;
        }

        FileChannel get(int i) {
            return channels[i];
        }

        @Override
        public void close() throws IOException {
            closeAll(channels, channels.length, null);
        }
    }

    /**
     * What {@link #openPlainFiles} requires of the files besides being plain: their owner ({@code null}: any; Hadoop
     * requires the job's user when security is on), how they are opened ({@link OutputFileOpener}), for which job
     * ({@code null}: none; the opener caps each job's stuck opens), and why an owner cannot be checked soundly here
     * ({@code null}: it can; else every file with an owner to check is refused, {@link NoSecureOpen}).
     */
    record Rules(String owner, OutputFileOpener opener, String job, String ownerUnsound) {
        /** Any owner, opened on the calling thread. */
        static final Rules ANY = new Rules(null, OutputFileOpener.DIRECT);

        Rules(String owner, OutputFileOpener opener) {
            this(owner, opener, null, null);
        }
    }

    /** The kernel setting that keeps a user from hard-linking a file it neither owns nor may read and write. */
    static final java.nio.file.Path PROTECTED_HARDLINKS = java.nio.file.Paths.get("/proc/sys/fs/protected_hardlinks");

    /**
     * Why the owner check of {@link #openPlainFiles} cannot be sound here, or {@code null} when it can. Java reads
     * no attributes of an opened channel, so the check after the open reads them by name: a task that swaps a file
     * in during the open and the checked one back before that check has the file it swapped in served. That file
     * can only be a hard link the task made, which gives it nothing it could not read itself only when the kernel's
     * {@code fs.protected_hardlinks} ({@code sysctl}, read at {@code sysctl}) is 1.
     */
    static String hardlinksUnprotected(java.nio.file.Path sysctl) {
        String value;
        try {
            value = Files.readString(sysctl).trim();
        } catch (IOException | RuntimeException e) {
            return "the kernel's fs.protected_hardlinks cannot be read (" + sysctl + ": " + e + "), so a task could"
                    + " have a hard link to another user's output served in spite of the owner check";
        }
        if ("1".equals(value)) {
            return null;
        }
        return "the kernel's fs.protected_hardlinks is " + value + " (" + sysctl + "), not 1, so a task could have a"
                + " hard link to another user's output served in spite of the owner check";
    }

    /** A file {@link #openPlainFiles} refused because it is not owned by the user it must be (security is on). */
    static final class WrongOwner extends IOException {
        private static final long serialVersionUID = 1L;

        WrongOwner(String message) {
            super(message);
        }
    }

    /**
     * Opens the plain files {@code names} (for reading) in {@code dir}, which is {@code relative} below a local
     * dir. The local dir is opened by its path (it may be a link, an administrator's choice); then every component
     * of {@code relative} is opened as a directory relative to the one before with no link followed, and each file
     * relative to the last one, not following a link either, and checked to be a plain file (owned by
     * {@code rules.owner()} when that is set) through that directory before and after it is opened (the same file,
     * its length the opened one's). So what the caller reads or maps is a plain file reached from the local dir
     * through directories only, whatever is swapped in those directories meanwhile. The check after the open reads
     * the name again, not the opened channel (Java has no fstat of a channel): a file swapped in during the open
     * and swapped out again before that check is what is opened. That file can only be a hard link a task made
     * there: with an owner to check, files are served only when {@link #hardlinksUnprotected} says links give a
     * task nothing it could not read ({@code rules.ownerUnsound()} otherwise). A FIFO swapped in between the check
     * and the open would hold the opening thread until a writer opens it (Java opens blocking): the
     * {@link OutputFileOpener} bounds that.
     *
     * @throws NoSecureOpen when this JVM cannot open files relative to a directory (not Linux), or an owner is to be
     *         checked and cannot be soundly ({@code rules.ownerUnsound()})
     * @throws WrongOwner when a file's owner is not {@code rules.owner()}
     * @throws IOException when a component is a link or not a directory, or a file is not a plain file
     */
    static OpenedFiles openPlainFiles(File dir, String relative, Rules rules, String... names) throws IOException {
        java.nio.file.Path path = dir.toPath();
        java.nio.file.Path rel = java.nio.file.Paths.get(relative).normalize();
        if (rel.isAbsolute() || rel.startsWith("..") || !path.endsWith(rel)) {
            throw new IOException(dir + " is not " + relative + " below a local dir");
        }
        if (rules.owner() != null && rules.ownerUnsound() != null) {
            throw new NoSecureOpen(rules.ownerUnsound());
        }
        java.nio.file.Path localDir = path;
        for (int i = 0; i < rel.getNameCount(); i++) {
            localDir = localDir.getParent();
        }
        DirectoryStream<java.nio.file.Path> at = Files.newDirectoryStream(localDir);
        try {
            if (!(at instanceof SecureDirectoryStream<java.nio.file.Path> below)) {
                throw new NoSecureOpen("this JVM cannot open a file relative to a directory it opened ("
                        + "java.nio.file.SecureDirectoryStream is not available here)");
            }
            for (int i = 0; i < rel.getNameCount(); i++) {
                SecureDirectoryStream<java.nio.file.Path> next = below.newDirectoryStream(rel.getName(i),
                        LinkOption.NOFOLLOW_LINKS);
                at.close();
                at = next;
                below = next;
            }
            FileChannel[] channels = new FileChannel[names.length];
            for (int i = 0; i < names.length; i++) {
                try {
                    channels[i] = openPlainFile(below, names[i], new File(dir, names[i]).toString(), rules);
                } catch (IOException | RuntimeException e) {
                    closeAll(channels, i, e);
                    throw e;
                }
            }
            return new OpenedFiles(channels);
        } finally {
            at.close();
        }
    }

    /**
     * {@code firstName} in {@code firstDir} and {@code secondName} in {@code secondDir}, both {@code relative} below a
     * local dir (the same one or two: a map task's allocator may put {@code file.out} and its index on different
     * disks), each opened as {@link #openPlainFiles} opens files; the first is closed again when the second fails.
     */
    static OpenedFiles openPlainFiles(File firstDir, String firstName, File secondDir, String secondName,
                                      String relative, Rules rules) throws IOException {
        if (firstDir.equals(secondDir)) {
            return openPlainFiles(firstDir, relative, rules, firstName, secondName);
        }
        OpenedFiles first = openPlainFiles(firstDir, relative, rules, firstName);
        try {
            OpenedFiles second = openPlainFiles(secondDir, relative, rules, secondName);
            return new OpenedFiles(new FileChannel[] {first.get(0), second.get(0)});
        } catch (IOException | RuntimeException e) {
            try {
                first.close();
            } catch (IOException closing) {
                e.addSuppressed(closing);
            }
            throw e;
        }
    }

    /** {@link #openPlainFiles} with any owner, opened on the calling thread. */
    static OpenedFiles openPlainFiles(File dir, String relative, String... names) throws IOException {
        return openPlainFiles(dir, relative, Rules.ANY, names);
    }

    static final Set<OpenOption> READ_NO_LINK = Set.of(StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS);

    private static FileChannel openPlainFile(SecureDirectoryStream<java.nio.file.Path> dir, String name, String shown,
                                             Rules rules) throws IOException {
        java.nio.file.Path file = java.nio.file.Paths.get(name);
        PosixFileAttributeView view = dir.getFileAttributeView(file, PosixFileAttributeView.class,
                LinkOption.NOFOLLOW_LINKS);
        if (view == null) {
            throw new NoSecureOpen("this JVM cannot read a file's owner through a directory it opened");
        }
        PosixFileAttributes before = view.readAttributes();
        if (!before.isRegularFile()) { // a link, a pipe (whose open would block), a device, a directory
            throw new IOException(shown + " is not a plain file");
        }
        checkOwner(before, rules.owner(), shown);
        SeekableByteChannel opened = rules.opener().open(dir, file, shown, rules.job()); // a link now: refused (ELOOP)
        try {
            if (!(opened instanceof FileChannel channel)) {
                throw new IOException(shown + " cannot be mapped (no FileChannel)");
            }
            PosixFileAttributes after = view.readAttributes();
            if (!after.isRegularFile() || !Objects.equals(before.fileKey(), after.fileKey())
                    || channel.size() != after.size()) {
                throw new IOException(shown + " was replaced while it was opened");
            }
            checkOwner(after, rules.owner(), shown);
            return channel;
        } catch (IOException | RuntimeException e) {
            try {
                opened.close();
            } catch (IOException suppressed) {
                e.addSuppressed(suppressed);
            }
            throw e;
        }
    }

    private static void checkOwner(PosixFileAttributes a, String owner, String shown) throws WrongOwner {
        if (owner != null && !owner.equals(a.owner().getName())) {
            throw new WrongOwner(shown + " is owned by " + a.owner().getName() + ", not by the job's user " + owner);
        }
    }

    /** Closes the first {@code count} of {@code channels} in reverse order; errors go to {@code primary}. */
    private static void closeAll(FileChannel[] channels, int count, Throwable primary) throws IOException {
        IOException first = null;
        for (int i = count - 1; i >= 0; i--) {
            try {
                if (channels[i] != null) {
                    channels[i].close();
                }
            } catch (IOException e) {
                if (primary != null) {
                    primary.addSuppressed(e);
                } else if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    @Override
    public String toString() {
        return configured.toString();
    }
}
