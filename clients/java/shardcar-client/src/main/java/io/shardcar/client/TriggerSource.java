package io.shardcar.client;

/** Why an execution was started. */
public enum TriggerSource {
  /** A cron fire. */
  CRON,
  /** A catch-up run for a fire that was missed while the item was still running. */
  MISFIRE,
  /** Items taken over from an instance that crashed. */
  FAILOVER,
  /** Triggered once by an operator. */
  MANUAL,
  /**
   * A failed item run again by the sidecar under the job's {@link RetryPolicy};
   * {@link ShardingContext#getAttempt()} says which retry.
   */
  RETRY,
  /**
   * An item of a resident job, held until the sidecar revokes it or the lease runs out;
   * {@link ShardingContext#getAttempt()} counts the restarts after the holder ended a hold.
   */
  RESIDENT,
  /**
   * The sidecar did not say, or sent a source this client does not know (a newer sidecar, or
   * {@code TRIGGER_SOURCE_UNSPECIFIED}). Never assumed to be a cron fire.
   */
  UNKNOWN
}
