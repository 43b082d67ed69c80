package io.streamscale.operators;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system with file modes set through {@code java.nio} instead of a
 * {@code chmod} child process.
 *
 * <p>pyspark from PyPI ships without Hadoop's native library, so Hadoop's local file system
 * forks {@code chmod} for every file it creates (and for its {@code .crc}): about 20-45 ms a
 * file, paid by every checkpoint file of every micro-batch (offset log, commit log, each state
 * partition's changelog and snapshot). Everything else (checksums, renames, listing) is
 * Hadoop's own; only {@link RawLocalFileSystem#setPermission} changes. {@code
 * streamscale.spark} sets {@code fs.file.impl} to {@link LocalFiles} (the FileSystem API) and
 * {@code fs.AbstractFileSystem.file.impl} to {@link Context} (the FileContext API Spark's
 * checkpoint manager uses).
 */
public final class LocalFiles extends LocalFileSystem {
  public LocalFiles() {
    super(new Raw());
  }

  /** The raw local file system, its permissions set through java.nio. */
  public static final class Raw extends RawLocalFileSystem {
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission));
    }
  }

  /** The checksummed local file system of Hadoop's FileContext API (as its LocalFs). */
  public static final class Context extends ChecksumFs {
    public Context(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(new RawContext(uri, conf));
    }
  }

  /** The raw one of the FileContext API (as Hadoop's RawLocalFs), over {@link Raw}. */
  public static final class RawContext extends DelegateToFileSystem {
    public RawContext(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new Raw(), conf, "file", false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1;
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    @Deprecated
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true;
    }
  }

  static Set<PosixFilePermission> posix(FsPermission permission) {
    short mode = permission.toShort();
    Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
    PosixFilePermission[] bits = {
      PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
      PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
      PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
      PosixFilePermission.OWNER_READ
    };
    for (int i = 0; i < bits.length; i++) {
      if ((mode & (1 << i)) != 0) {
        out.add(bits[i]);
      }
    }
    return out;
  }
}
