package io.shardcar.client;

import java.util.List;
import java.util.Objects;
import java.util.function.BooleanSupplier;
import java.util.function.LongSupplier;
import java.util.function.Supplier;

/**
 * Runs a {@link DataflowHandler} as a {@link JobHandler}, with the semantics of ElasticJob 3.0's
 * {@code DataflowJobExecutor}: one-off (fetch once, process if there is data) unless the job's
 * effective configuration has {@code streaming.process=true}; streaming (fetch and process while a
 * fetch returns data) ends before the next fetch once the item may not go on ({@link #stopReason}).
 */
final class DataflowRunner<T> implements JobHandler {
  private static final System.Logger LOG = System.getLogger(DataflowRunner.class.getName());

  private final DataflowHandler<T> handler;
  private final Supplier<JobConfig> effectiveConfig;
  private final BooleanSupplier stopping;
  private final LongSupplier shardingEpoch;

  /**
   * @param effectiveConfig the job's configuration as the sidecar uses it, read at every decision
   * @param stopping whether the registration takes no new work (a {@code Shutdown}, or closing)
   * @param shardingEpoch the registration's current assignment epoch
   */
  DataflowRunner(DataflowHandler<T> handler, Supplier<JobConfig> effectiveConfig, BooleanSupplier stopping,
      LongSupplier shardingEpoch) {
    this.handler = Objects.requireNonNull(handler, "handler");
    this.effectiveConfig = effectiveConfig;
    this.stopping = stopping;
    this.shardingEpoch = shardingEpoch;
  }

  @Override
  public void execute(ShardingContext ctx) throws Exception {
    long startEpoch = ctx.startEpoch();
    List<T> data = handler.fetch(ctx);
    if (!streaming()) {
      if (hasData(data)) {
        handler.process(ctx, data);
      }
      return;
    }
    while (hasData(data)) {
      handler.process(ctx, data);
      String stop = stopReason(ctx, startEpoch);
      if (stop != null) {
        LOG.log(System.Logger.Level.DEBUG, "job {0}: item {1} of execution {2}: streaming ends: {3}",
            ctx.getJobName(), ctx.getShardingItem(), ctx.getExecutionId(), stop);
        return;
      }
      data = handler.fetch(ctx);
    }
  }

  /** Why a streaming item may not fetch again, or null when it may (ElasticJob's {@code isEligibleForJobRunning}). */
  String stopReason(ShardingContext ctx, long startEpoch) {
    if (ctx.isCancelled()) {
      return "the item was cancelled (revoked, lease ran out, stream lost, or shutdown grace over)";
    }
    if (stopping.getAsBoolean()) {
      return "the worker is shutting down";
    }
    if (startEpoch >= 0 && shardingEpoch.getAsLong() != startEpoch) {
      return "the job's sharding changed";
    }
    if (!streaming()) {
      return JobConfig.STREAMING_PROCESS + " is no longer true";
    }
    return null;
  }

  private boolean streaming() {
    JobConfig config = effectiveConfig.get();
    return config != null && config.isStreamingProcess();
  }

  private static boolean hasData(List<?> data) {
    return data != null && !data.isEmpty();
  }
}
