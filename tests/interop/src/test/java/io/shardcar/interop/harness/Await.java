package io.shardcar.interop.harness;

import java.time.Duration;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

/** Waiting on conditions with deadlines: no sleep decides an outcome. */
public final class Await {
  private Await() {}

  /**
   * Polls {@code condition} every 50 ms until it holds; fails after {@code timeout} with
   * {@code what} and the {@code state} at that moment (e.g. a dump of the job's nodes).
   */
  public static void until(String what, Duration timeout, BooleanSupplier condition, Supplier<String> state) {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (true) {
      if (condition.getAsBoolean()) {
        return;
      }
      if (System.nanoTime() - deadline > 0) {
        throw new AssertionError("timed out after " + timeout.toMillis() + " ms waiting for: " + what + "\n" + state.get());
      }
      sleep(50);
    }
  }

  public static void sleep(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }
}
