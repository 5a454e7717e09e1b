package io.shardcar.client;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.DoubleSupplier;

/** Exponential reconnect backoff with ±20 % jitter; reset after a successful registration. */
final class Backoff {
  private final long initialMillis;
  private final long maxMillis;
  private final DoubleSupplier random;
  private long nextMillis;

  Backoff(Duration initial, Duration max) {
    this(initial, max, () -> ThreadLocalRandom.current().nextDouble());
  }

  /** {@code random}: uniform in [0, 1), where the jitter comes from (a fixed value in tests). */
  Backoff(Duration initial, Duration max, DoubleSupplier random) {
    this.initialMillis = Math.max(1, initial.toMillis());
    this.maxMillis = Math.max(initialMillis, max.toMillis());
    this.random = random;
    this.nextMillis = initialMillis;
  }

  /** The delay before the next attempt; each call doubles the following one up to the maximum. */
  long nextDelayMillis() {
    long base = nextMillis;
    nextMillis = Math.min(maxMillis, nextMillis * 2);
    double jitter = 0.8 + 0.4 * random.getAsDouble();
    return Math.max(1, Math.round(base * jitter));
  }

  void reset() {
    nextMillis = initialMillis;
  }
}
