package io.shardcar.client;

/**
 * The work of a job, called once per sharding item of every trigger, on a thread of the
 * registration's bounded item executor.
 *
 * <p>Returning normally reports the item complete; throwing reports it failed with the exception's
 * text (at most 16384 bytes of UTF-8). When the item is revoked, the worker's lease runs out, or the
 * connection to the sidecar is lost, the calling thread is interrupted and whatever the handler
 * does afterwards is not reported (the item is given back with {@code Decline} once the handler
 * returns): long-running handlers should stop on {@link InterruptedException} or check
 * {@link ShardingContext#isCancelled()}, which compares the lease with the clock when called.
 */
@FunctionalInterface
public interface JobHandler {
  void execute(ShardingContext context) throws Exception;
}
