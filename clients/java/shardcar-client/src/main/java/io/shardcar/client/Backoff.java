package io.shardcar.client;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/** Exponential reconnect backoff with ±20 % jitter; reset after a successful registration. */
final class Backoff {
  private final long initialMillis;
  private final long maxMillis;
  private long nextMillis;

  Backoff(Duration initial, Duration max) {
    this.initialMillis = Math.max(1, initial.toMillis());
    this.maxMillis = Math.max(initialMillis, max.toMillis());
    this.nextMillis = initialMillis;
  }

  /** The delay before the next attempt; each call doubles the following one up to the maximum. */
  long nextDelayMillis() {
    long base = nextMillis;
    nextMillis = Math.min(maxMillis, nextMillis * 2);
    double jitter = 0.8 + 0.4 * ThreadLocalRandom.current().nextDouble();
    return Math.max(1, Math.round(base * jitter));
  }

  void reset() {
    nextMillis = initialMillis;
  }
}
