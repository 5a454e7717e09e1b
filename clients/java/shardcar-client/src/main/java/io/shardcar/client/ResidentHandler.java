package io.shardcar.client;

/**
 * The work of a resident job ({@link JobConfig.Builder#resident(boolean)}): {@link #hold} runs one
 * item for as long as this worker holds it, from the sidecar's {@link TriggerSource#RESIDENT}
 * trigger until the item's context says cancelled. Register it with
 * {@link ShardcarWorker#registerResident(JobConfig, ResidentHandler)}.
 *
 * <p>A hold is cancelled when the sidecar revokes it (the item moves to another worker on a join, a
 * leave, a server or item disabled, a resize), the lease runs out, the connection to the sidecar is
 * lost, the sidecar sends {@code Shutdown}, or the worker closes: {@link ShardingContext#isCancelled()}
 * turns true, {@link ShardingContext#awaitCancelled(java.time.Duration)} returns true, and the
 * thread is interrupted. The handler should then stop at once and return. How it ends decides the
 * answer:
 *
 * <ul>
 *   <li>returned (or threw) after the hold was cancelled: the item is given back with
 *       {@code Decline}; only then (or once the lease has run out) does its next holder start, so
 *       two holds of an item never overlap;
 *   <li>returned while not cancelled: {@code Complete};
 *   <li>threw while not cancelled: {@code ReportFailure} with the exception's text (reported by the
 *       job's error handler).
 * </ul>
 *
 * <p>After {@code Complete} or {@code ReportFailure} the sidecar starts the item again on its owner
 * after a backoff (the job's {@link RetryPolicy} backoffs, else 1 s doubling up to 1 min),
 * {@link ShardingContext#getAttempt()} counting the restarts. Each hold runs on a thread of its
 * own, whatever {@code itemConcurrency} says. Pass {@link ShardingContext#getFencingToken()} to
 * whatever the hold writes (a checkpoint, an offset): it grows every time the item changes hands,
 * so a store can refuse a late write of an earlier holder.
 *
 * <pre>{@code
 * worker.registerResident(JobConfig.newBuilder("partitions", 6).build(), ctx -> {
 *   long offset = checkpoints.read(ctx.getShardingItem());
 *   while (!ctx.awaitCancelled(Duration.ofMillis(200))) {
 *     offset = consume(ctx.getShardingItem(), offset);
 *     checkpoints.write(ctx.getShardingItem(), offset, ctx.getFencingToken());
 *   }
 * });
 * }</pre>
 */
@FunctionalInterface
public interface ResidentHandler {
  /**
   * Holds one item until its context says cancelled.
   *
   * @param context the item, its fencing token, and its cancellation
   * @throws Exception to report the hold failed (it is started again after a backoff)
   */
  void hold(ShardingContext context) throws Exception;
}
