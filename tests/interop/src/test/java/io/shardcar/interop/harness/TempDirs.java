package io.shardcar.interop.harness;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.stream.Stream;

/** The harness's temporary directories (sockets, data of ZooKeeper and PostgreSQL). */
final class TempDirs {
  private TempDirs() {}

  /** Removes {@code dir} and everything under it, as far as it can: what cannot go is left. */
  static void deleteTree(Path dir) {
    try (Stream<Path> files = Files.walk(dir)) {
      files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      // gone already, or unreadable: a temporary directory either way
    }
  }
}
