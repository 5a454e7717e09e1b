package io.shardcar.client;

import java.time.Duration;
import java.util.Objects;

/**
 * How the sidecar runs a failed item again ({@code shardcar.v1.RetryPolicy}), set with
 * {@link JobConfig.Builder#retry(RetryPolicy)}.
 *
 * <p>An item whose handler threw (or that ran past {@code executionTimeoutSeconds}) runs again as
 * a new execution of source {@link TriggerSource#RETRY} on the item's owner,
 * {@link ShardingContext#getAttempt()} 1 for the first retry, after {@code initialBackoff}; each
 * further wait is the one before times {@code multiplier}, at most {@code maxBackoff};
 * {@code maxAttempts} runs in all, the first included. Unset, the sidecar's defaults apply: 1 s,
 * 1 min (never below {@code initialBackoff}), 2.
 *
 * <p>The builder refuses what the sidecar refuses, with an {@link InvalidJobConfigException} naming
 * the field as the sidecar's refusal would ({@code retry.maxAttempts}, ...): {@code maxAttempts} 0
 * to 100 (0 and 1: no retries), backoffs 10 ms to 1 day, {@code maxBackoff} not below
 * {@code initialBackoff}, {@code multiplier} 1 to 10.
 *
 * <p>A {@link JobConfig.Builder#resident(boolean) resident} job uses the backoffs, not the attempts:
 * they are the waits before a hold its worker ended is started again. The sidecar keeps a policy
 * only when {@code maxAttempts} is at least 2; with 0 or 1 a resident job waits 1 s doubling to
 * 1 min.
 */
public final class RetryPolicy {
  /** The most runs of an item a policy may ask for. */
  public static final int MAX_ATTEMPTS = 100;
  /** The shortest backoff the sidecar takes. */
  public static final Duration MIN_BACKOFF = Duration.ofMillis(10);
  /** The longest backoff the sidecar takes. */
  public static final Duration MAX_BACKOFF = Duration.ofDays(1);
  /** The sidecar's initial backoff when none is set. */
  public static final Duration DEFAULT_INITIAL_BACKOFF = Duration.ofSeconds(1);

  private final int maxAttempts;
  private final Duration initialBackoff;
  private final Duration maxBackoff;
  private final Double multiplier;

  private RetryPolicy(int maxAttempts, Duration initialBackoff, Duration maxBackoff, Double multiplier) {
    this.maxAttempts = maxAttempts;
    this.initialBackoff = initialBackoff;
    this.maxBackoff = maxBackoff;
    this.multiplier = multiplier;
  }

  /** A builder of a policy of {@code maxAttempts} runs in all (3: the first run and two retries). */
  public static Builder newBuilder(int maxAttempts) {
    return new Builder().maxAttempts(maxAttempts);
  }

  /**
   * The policy the sidecar sent, taken as it is: what it sends is the job's effective policy,
   * which it checked when it was written; one it did not check (data written to ZooKeeper by hand)
   * must not stop a worker from reading its stream.
   */
  static RetryPolicy asSent(int maxAttempts, Duration initialBackoff, Duration maxBackoff, Double multiplier) {
    return new RetryPolicy(maxAttempts, initialBackoff, maxBackoff, multiplier);
  }

  /** A builder holding this policy's values. */
  public Builder toBuilder() {
    Builder b = new Builder();
    b.maxAttempts = maxAttempts;
    b.initialBackoff = initialBackoff;
    b.maxBackoff = maxBackoff;
    b.multiplier = multiplier;
    return b;
  }

  /** Runs of an item in all, the first included. */
  public int getMaxAttempts() {
    return maxAttempts;
  }

  /** The wait before the first retry; {@code null} when unset (the sidecar then waits 1 s). */
  public Duration getInitialBackoff() {
    return initialBackoff;
  }

  /** The longest wait; {@code null} when unset (the sidecar then uses 1 min, never below the initial one). */
  public Duration getMaxBackoff() {
    return maxBackoff;
  }

  /** What each wait is multiplied by; {@code null} when unset (the sidecar then uses 2). */
  public Double getMultiplier() {
    return multiplier;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof RetryPolicy)) {
      return false;
    }
    RetryPolicy p = (RetryPolicy) o;
    return maxAttempts == p.maxAttempts
        && Objects.equals(initialBackoff, p.initialBackoff)
        && Objects.equals(maxBackoff, p.maxBackoff)
        && Objects.equals(multiplier, p.multiplier);
  }

  @Override
  public int hashCode() {
    return Objects.hash(maxAttempts, initialBackoff, maxBackoff, multiplier);
  }

  @Override
  public String toString() {
    return "RetryPolicy{maxAttempts=" + maxAttempts + ", initialBackoff=" + initialBackoff
        + ", maxBackoff=" + maxBackoff + ", multiplier=" + multiplier + "}";
  }

  /** Builds a {@link RetryPolicy}; every setter checks its value and returns the builder. */
  public static final class Builder {
    private int maxAttempts;
    private Duration initialBackoff;
    private Duration maxBackoff;
    private Double multiplier;

    private Builder() {}

    /**
     * Runs of an item in all, the first included: 0 to 100, where 0 and 1 both mean no retries (as
     * the sidecar reads them).
     *
     * @throws InvalidJobConfigException (field {@code retry.maxAttempts}) out of that range
     */
    public Builder maxAttempts(int maxAttempts) {
      if (maxAttempts < 0 || maxAttempts > MAX_ATTEMPTS) {
        throw invalid("retry.maxAttempts", "retry.maxAttempts must be from 0 to " + MAX_ATTEMPTS
            + " (runs of an item in all, the first included; 0 or 1: no retries), got " + maxAttempts);
      }
      this.maxAttempts = maxAttempts;
      return this;
    }

    /**
     * The wait before the first retry, 10 ms to 1 day; null unsets it (1 s).
     *
     * @throws InvalidJobConfigException (field {@code retry.initialBackoff}) out of that range
     */
    public Builder initialBackoff(Duration initialBackoff) {
      this.initialBackoff = backoff("retry.initialBackoff", initialBackoff);
      return this;
    }

    /**
     * The longest wait between two attempts, 10 ms to 1 day and not below the initial backoff;
     * null unsets it (1 min, never below the initial backoff).
     *
     * @throws InvalidJobConfigException (field {@code retry.maxBackoff}) out of that range
     */
    public Builder maxBackoff(Duration maxBackoff) {
      this.maxBackoff = backoff("retry.maxBackoff", maxBackoff);
      return this;
    }

    /**
     * Each wait is the one before times this: 1 to 10 (unset: 2).
     *
     * @throws InvalidJobConfigException (field {@code retry.multiplier}) out of that range
     */
    public Builder multiplier(double multiplier) {
      if (!(multiplier >= 1 && multiplier <= 10)) { // NaN fails both
        throw invalid("retry.multiplier", "retry.multiplier must be from 1 to 10 (each wait is the one before "
            + "times it), got " + multiplier);
      }
      this.multiplier = multiplier;
      return this;
    }

    /**
     * @throws InvalidJobConfigException (field {@code retry.maxBackoff}) when the max backoff is below
     *     the initial one (1 s when unset)
     */
    public RetryPolicy build() {
      Duration floor = initialBackoff != null ? initialBackoff : DEFAULT_INITIAL_BACKOFF;
      if (maxBackoff != null && maxBackoff.compareTo(floor) < 0) {
        String below = initialBackoff != null
            ? "retry.initialBackoff (" + initialBackoff + ")"
            : "the default initialBackoff (" + DEFAULT_INITIAL_BACKOFF + ")";
        throw invalid("retry.maxBackoff", "retry.maxBackoff (" + maxBackoff + ") must not be below " + below);
      }
      return new RetryPolicy(maxAttempts, initialBackoff, maxBackoff, multiplier);
    }

    private static Duration backoff(String field, Duration value) {
      if (value != null && (value.compareTo(MIN_BACKOFF) < 0 || value.compareTo(MAX_BACKOFF) > 0)) {
        throw invalid(field, field + " must be between 10 ms and 1 day, got " + value);
      }
      return value;
    }

    private static InvalidJobConfigException invalid(String field, String message) {
      return new InvalidJobConfigException(field, message, null);
    }
  }
}
