package io.shardcar.interop.member;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;

/**
 * Which items fail, on both sides. While the control file {@code {dir}/{member}.fail} exists, every
 * run of the items it lists (comma-separated, e.g. {@code 1} or {@code 0,1}) ends by throwing
 * {@link #failure(int)} once its body is over. The items listed in {@code {dir}/{member}.fail-once}
 * fail at their next run only: the member takes each one out of that file as it fails it, so a
 * test can fail one run and let the next one (a retry) complete without racing it. The same
 * exception on both sides, so that what ElasticJob and shardcar record and report about it can be
 * compared.
 */
final class FailSwitch {
  private final Path always;
  private final Path once;

  FailSwitch(Path dir, String member) {
    this.always = dir.resolve(member + ".fail");
    this.once = dir.resolve(member + ".fail-once");
  }

  /** Whether this run of {@code item} fails (taking a once-only item out of its file). */
  synchronized boolean fails(int item) {
    if (items(always).contains(item)) {
      return true;
    }
    List<Integer> pending = items(once);
    if (!pending.remove(Integer.valueOf(item))) {
      return false;
    }
    // Rewritten whole and moved into place, so that the test never reads half a file.
    try {
      Path tmp = once.resolveSibling(once.getFileName() + ".tmp");
      Files.writeString(tmp, String.join(",", pending.stream().map(String::valueOf).toList()), StandardCharsets.UTF_8);
      Files.move(tmp, once, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return true;
  }

  private static List<Integer> items(Path file) {
    String text;
    try {
      text = Files.readString(file, StandardCharsets.UTF_8);
    } catch (NoSuchFileException e) {
      return new ArrayList<>();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    List<Integer> items = new ArrayList<>();
    for (String each : text.trim().split(",")) {
      if (!each.isBlank()) {
        items.add(Integer.valueOf(each.trim()));
      }
    }
    return items;
  }

  /** What a failing item throws. */
  static IllegalStateException failure(int item) {
    return new IllegalStateException("item " + item + " failed on purpose");
  }
}
