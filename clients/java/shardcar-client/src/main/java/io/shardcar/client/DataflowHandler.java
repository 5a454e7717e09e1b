package io.shardcar.client;

import java.util.List;

/**
 * The work of a dataflow job, ElasticJob's {@code DataflowJob} for shardcar: for each sharding
 * item of every trigger the worker calls {@link #fetch} and, when it returned data,
 * {@link #process} with it. Register it with {@link ShardcarWorker#register(JobConfig, DataflowHandler)}.
 *
 * <p>Two modes, chosen by the job's {@code streaming.process} property
 * ({@link JobConfig#STREAMING_PROCESS}) in the configuration the sidecar uses, read when each item
 * starts:
 *
 * <ul>
 *   <li><b>one-off</b> (the default): fetch once; process the data if there is any (a null or
 *       empty list is none). The item is complete.
 *   <li><b>streaming</b> ({@code streaming.process=true}): fetch, process, and fetch again as long
 *       as a fetch returns data; the item is complete when a fetch returns none. Before each
 *       further fetch the worker checks that the item may go on, and ends the loop when it may
 *       not: the item was cancelled (revoked, the lease ran out, the stream was lost or replaced,
 *       the drain timeout is over: the item is declined, never answered), the worker is
 *       shutting down or the sidecar sent {@code Shutdown} (the item is complete), or an
 *       assignment received since the trigger no longer holds the item (a resharding took it:
 *       another instance joined, {@code DisableJob}; ElasticJob's {@code isNeedSharding}; the item
 *       is complete). An item a resharding left to this instance goes on streaming.
 * </ul>
 *
 * <p>Data fetched after the item was cancelled is not processed: the item ends and is declined.
 * A {@code fetch} or {@code process} that throws ends the item: it is reported failed
 * ({@code ReportFailure}) with the exception's text, unless the item was cancelled (then it is
 * declined). Like {@link JobHandler}, both run on an item thread that is interrupted when the item
 * is cancelled; long calls should stop on {@link InterruptedException} or check
 * {@link ShardingContext#isCancelled()}.
 *
 * @param <T> the type of the data items
 */
public interface DataflowHandler<T> {
  /**
   * Fetches the next data of one item.
   *
   * @param context the item, its trigger and its cancellation
   * @return the data to process; null or empty when there is none
   * @throws Exception to report the item failed
   */
  List<T> fetch(ShardingContext context) throws Exception;

  /**
   * Processes data that {@link #fetch} returned (never empty).
   *
   * @param context the item, its trigger and its cancellation
   * @param data what the last fetch returned
   * @throws Exception to report the item failed
   */
  void process(ShardingContext context, List<T> data) throws Exception;
}
