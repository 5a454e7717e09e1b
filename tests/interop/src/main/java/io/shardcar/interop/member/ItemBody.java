package io.shardcar.interop.member;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.function.BooleanSupplier;

/**
 * What every item run does, on both sides: normally a short run ({@code --item-ms}, default
 * 200 ms); while the control file {@code {dir}/{member}.slow} exists, a long one that lasts until
 * the file is removed (at most 120 s), so that a test can kill the member in the middle of an
 * item. Stops early when {@code cancelled} says so or the thread is interrupted.
 */
final class ItemBody {
  private final Path slowFile;
  private final long itemMillis;

  ItemBody(Path dir, String member, long itemMillis) {
    this.slowFile = dir.resolve(member + ".slow");
    this.itemMillis = itemMillis;
  }

  boolean slow() {
    return Files.exists(slowFile);
  }

  /** Runs the item; returns true when it ran to its end, false when it was cancelled or interrupted. */
  boolean run(boolean slow, BooleanSupplier cancelled) {
    long deadline = System.currentTimeMillis() + (slow ? 120_000 : itemMillis);
    while (System.currentTimeMillis() < deadline) {
      if (cancelled.getAsBoolean()) {
        return false;
      }
      if (slow && !Files.exists(slowFile)) {
        return true;
      }
      try {
        Thread.sleep(20);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return false;
      }
    }
    return true;
  }
}
