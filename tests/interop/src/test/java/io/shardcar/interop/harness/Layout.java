package io.shardcar.interop.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/** Where things are: the repository, the sidecar binary, the member class path, the logs. */
public final class Layout {
  private Layout() {}

  public static Path repo() {
    String p = System.getProperty("interop.repo");
    if (p != null && !p.isBlank()) {
      return Path.of(p).toAbsolutePath().normalize();
    }
    for (Path dir = Path.of("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
      if (Files.isRegularFile(dir.resolve("Cargo.toml")) && Files.isDirectory(dir.resolve("proto"))) {
        return dir;
      }
    }
    throw new IllegalStateException("repository root not found above " + Path.of("").toAbsolutePath());
  }

  /** {@code -Dshardcar.bin}, else {@code $SHARDCAR_BIN}, else {@code <repo>/target/debug/shardcar}. */
  public static Path sidecarBinary() {
    for (String candidate : new String[] {System.getProperty("shardcar.bin"), System.getenv("SHARDCAR_BIN")}) {
      if (candidate != null && !candidate.isBlank() && !candidate.startsWith("${")) {
        Path p = Path.of(candidate);
        if (!Files.isExecutable(p)) {
          throw new IllegalStateException("SHARDCAR_BIN=" + candidate + " is not an executable file");
        }
        return p;
      }
    }
    Path p = repo().resolve("target/debug/shardcar");
    if (!Files.isExecutable(p)) {
      throw new IllegalStateException("no sidecar binary at " + p + ": cargo build --bin shardcar, or set SHARDCAR_BIN");
    }
    return p;
  }

  /** The class path of a member JVM: this module's classes and its runtime dependencies. */
  public static String memberClasspath() {
    String classes = System.getProperty("interop.classes", "target/classes");
    Path file = Path.of(System.getProperty("interop.classpath", "target/member.classpath"));
    try {
      return classes + java.io.File.pathSeparator + Files.readString(file, StandardCharsets.UTF_8).trim();
    } catch (IOException e) {
      throw new UncheckedIOException("no " + file + ": run the suite through Maven (tests/interop/run.sh)", e);
    }
  }

  public static Path logRoot() {
    Path dir = Path.of(System.getProperty("interop.logs", "target/interop-logs"));
    try {
      Files.createDirectories(dir);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return dir;
  }

  public static Path java() {
    return Path.of(System.getProperty("java.home"), "bin", "java");
  }
}
