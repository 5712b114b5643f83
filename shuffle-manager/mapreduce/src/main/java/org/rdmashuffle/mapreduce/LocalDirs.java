package org.rdmashuffle.mapreduce;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.List;
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
     * directory. (Checked before each use of the path; what the service opens afterwards is opened by that path.)
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

    @Override
    public String toString() {
        return configured.toString();
    }
}
