package io.shardcar.client;

import java.util.List;

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
   * The sidecar ruled on an item's answer: {@code failure} is the handler's exception text, or null
   * for a completion; {@code refused} is null when the sidecar accepted it, else its refusal (e.g.
   * {@code FAILED_PRECONDITION}: the execution was taken back). Never called for a call that
   * failed in transport: see {@link #onAnswerDropped}.
   */
  default void onAnswered(
      String jobName, String executionId, int item, String failure, ShardcarException refused) {}

  /**
   * The sidecar ruled on a {@code Decline}: the worker gave {@code items} back without running
   * them (no valid lease, shutting down) or after stopping them (lease ran out, revoke, grace
   * period over). {@code refused} is null when accepted (the usual case).
   */
  default void onDeclined(
      String jobName, String executionId, List<Integer> items, String reason, ShardcarException refused) {}

  /**
   * An answer or decline ({@code rpc}: {@code COMPLETE}, {@code REPORT_FAILURE}, {@code DECLINE})
   * failed in transport and its stream ended before it could be sent again: the sidecar neither
   * accepted nor refused it, and as the stream is over the execution is void anyway (the sidecar
   * hands the items to others once this worker can no longer be running them).
   */
  default void onAnswerDropped(String jobName, String rpc, String executionId, List<Integer> items, String why) {}

  /**
   * An item was stopped and its answer will never be sent: revoked, lease ran out, stream lost,
   * or the registration closed before it finished. It is declined once its handler returns.
   */
  default void onCancelled(String jobName, String executionId, int item, String reason) {}

  /** The lease ran out without renewal (or a renewal was void); all work stopped until a renewal. */
  default void onLeaseExpired(String jobName) {}

  /** The stream ended unexpectedly; a reconnect is scheduled after {@code retryInMillis}. */
  default void onDisconnected(String jobName, ShardcarException cause, long retryInMillis) {}

  /**
   * The sidecar sent {@code Shutdown}: the registration takes no new work and lets the running
   * items finish and answer. Once the sidecar has ended the stream, after a drain (the sidecar
   * restarts) it subscribes again ({@link #onDisconnected} follows) unless
   * {@link ShardcarWorker.Builder#stopOnDrain(boolean)} is set; after a remote shutdown it stops.
   */
  default void onShutdown(String jobName, String reason) {}
}
