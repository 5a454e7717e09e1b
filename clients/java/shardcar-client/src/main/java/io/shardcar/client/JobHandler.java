package io.shardcar.client;

/**
 * The work of a job, called once per sharding item of every trigger, on a thread of the
 * registration's bounded item executor.
 *
 * <p>Returning normally reports the item complete; throwing reports it failed with the exception's
 * text (at most 16384 bytes of UTF-8). A failed item is not retried before the job's next fire:
 * it runs again at the next cron fire (or manual trigger), not at once; a handler that wants
 * retries makes them itself, inside its run. When the item is revoked, the worker's lease runs out, or the
 * connection to the sidecar is lost, the calling thread is interrupted and whatever the handler
 * does afterwards is not reported (the item is given back with {@code Decline} once the handler
 * returns): long-running handlers should stop on {@link InterruptedException} or check
 * {@link ShardingContext#isCancelled()}, which compares the lease with the clock when called.
 */
@FunctionalInterface
public interface JobHandler {
  /**
   * Runs one item.
   *
   * @param context the item, its trigger and its cancellation
   * @throws Exception to report the item failed
   */
  void execute(ShardingContext context) throws Exception;
}
