package io.shardcar.client;

import java.util.List;
import java.util.Objects;
import java.util.function.BooleanSupplier;
import java.util.function.Predicate;
import java.util.function.Supplier;

/**
 * Runs a {@link DataflowHandler} as a {@link JobHandler}, with the semantics of ElasticJob 3.0's
 * {@code DataflowJobExecutor}: one-off (fetch once, process if there is data) unless the job's
 * effective configuration has {@code streaming.process=true} when the item starts; streaming (fetch
 * and process while a fetch returns data) ends before the next fetch once the item may not go on
 * ({@link #stopReason}). Data fetched once the item is cancelled is not processed (the item is
 * declined, as every cancelled item is).
 */
final class DataflowRunner<T> implements JobHandler {
  private static final System.Logger LOG = System.getLogger(DataflowRunner.class.getName());

  private final String jobName;
  private final DataflowHandler<T> handler;
  private final Supplier<JobConfig> effectiveConfig;
  private final Boolean explicit;
  private final BooleanSupplier stopping;
  private final Predicate<ShardingContext> handedOver;
  /** The effective configuration last warned about (a mismatch with {@link #explicit}); once each. */
  private JobConfig warned;

  /**
   * @param effectiveConfig the job's configuration as the sidecar uses it, read when an item starts
   * @param explicit the streaming mode written by {@code register(..., streaming)}, or null
   * @param stopping whether the registration takes no new work (a {@code Shutdown}, or closing)
   * @param handedOver whether an assignment since the item's trigger took the item from this instance
   */
  DataflowRunner(String jobName, DataflowHandler<T> handler, Supplier<JobConfig> effectiveConfig, Boolean explicit,
      BooleanSupplier stopping, Predicate<ShardingContext> handedOver) {
    this.jobName = jobName;
    this.handler = Objects.requireNonNull(handler, "handler");
    this.effectiveConfig = effectiveConfig;
    this.explicit = explicit;
    this.stopping = stopping;
    this.handedOver = handedOver;
  }

  @Override
  public void execute(ShardingContext ctx) throws Exception {
    boolean streaming = streaming();
    int batches = 0;
    while (true) {
      List<T> data = handler.fetch(ctx);
      if (data == null || data.isEmpty()) {
        ended(ctx, batches, "no more data");
        return;
      }
      if (ctx.isCancelled()) { // the data is not processed; the item is declined
        ended(ctx, batches, "cancelled after a fetch, its data not processed");
        return;
      }
      handler.process(ctx, data);
      batches++;
      if (!streaming) {
        ended(ctx, batches, "one-off");
        return;
      }
      String stop = stopReason(ctx);
      if (stop != null) {
        ended(ctx, batches, stop);
        return;
      }
    }
  }

  /**
   * Why a streaming item may not fetch again, or null when it may (ElasticJob's
   * {@code isEligibleForJobRunning}); checked after every process.
   */
  String stopReason(ShardingContext ctx) {
    if (ctx.isCancelled()) {
      return "the item was cancelled (revoked, lease ran out, stream lost, or drain timeout over)";
    }
    if (stopping.getAsBoolean()) {
      return "the worker is shutting down";
    }
    if (handedOver.test(ctx)) {
      return "a resharding took the item from this instance";
    }
    return null;
  }

  /**
   * The mode of an item starting now: the effective configuration's {@code streaming.process}. A
   * mismatch with the explicit mode is logged once per effective configuration.
   */
  boolean streaming() {
    JobConfig config = effectiveConfig.get();
    boolean mode = config != null && config.isStreamingProcess();
    if (explicit != null && config != null && explicit != mode) {
      synchronized (this) {
        if (warned != config) {
          warned = config;
          LOG.log(System.Logger.Level.WARNING,
              "job {0}: registered with {1}={2}, but the job''s stored configuration says {3} and wins "
                  + "(a configuration is written only when the job is created, or with overwrite)",
              jobName, JobConfig.STREAMING_PROCESS, explicit, mode);
        }
      }
    }
    return mode;
  }

  private static void ended(ShardingContext ctx, int batches, String why) {
    boolean byItself = why.equals("no more data") || why.equals("one-off");
    LOG.log(byItself ? System.Logger.Level.DEBUG : System.Logger.Level.INFO,
        "job {0}: item {1} of execution {2}: dataflow ended after {3} batch(es): {4}",
        ctx.getJobName(), ctx.getShardingItem(), ctx.getExecutionId(), batches, why);
  }
}
