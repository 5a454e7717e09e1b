package io.shardcar.interop.member;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;

/**
 * Which items fail, on both sides: while the control file {@code {dir}/{member}.fail} exists, the runs
 * of the items it lists (comma-separated, e.g. {@code 1} or {@code 0,1}) end by throwing
 * {@link #failure(int)} once their body is over. The same exception on both sides, so that what
 * ElasticJob and shardcar record about it can be compared.
 */
final class FailSwitch {
  private final Path file;

  FailSwitch(Path dir, String member) {
    this.file = dir.resolve(member + ".fail");
  }

  boolean fails(int item) {
    String text;
    try {
      text = Files.readString(file, StandardCharsets.UTF_8);
    } catch (NoSuchFileException e) {
      return false;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    for (String each : text.trim().split(",")) {
      if (each.trim().equals(Integer.toString(item))) {
        return true;
      }
    }
    return false;
  }

  /** What a failing item throws. */
  static IllegalStateException failure(int item) {
    return new IllegalStateException("item " + item + " failed on purpose");
  }
}
