package io.shardcar.client;

/**
 * Optional observer of a worker's life, for logging, metrics and tests. Callbacks run on the
 * registration's event thread: keep them short and never block in them.
 */
public interface WorkerListener {
  /** A stream was (re)established and the sidecar accepted the instance. */
  default void onRegistered(String jobName, String instanceId, JobConfig effectiveConfig) {}

  /** The instance's items, leadership or epoch changed. */
  default void onAssignment(String jobName, Assignment assignment) {}

  /**
   * An item's answer was sent: {@code failure} is the handler's exception text, or null for a
   * completion; {@code refused} is null when the sidecar accepted it, else why it did not.
   */
  default void onAnswered(
      String jobName, String executionId, int item, String failure, ShardcarException refused) {}

  /**
   * An item was stopped and its answer will never be sent: revoked, lease ran out, stream lost,
   * or the registration closed before it finished.
   */
  default void onCancelled(String jobName, String executionId, int item, String reason) {}

  /** The lease ran out without renewal; all work stopped until a renewal. */
  default void onLeaseExpired(String jobName) {}

  /** The stream ended unexpectedly; a reconnect is scheduled after {@code retryInMillis}. */
  default void onDisconnected(String jobName, ShardcarException cause, long retryInMillis) {}

  /** The sidecar sent {@code Shutdown} (remote shutdown or drain). */
  default void onShutdown(String jobName, String reason) {}
}
