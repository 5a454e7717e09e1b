package io.shardcar.client;

import java.time.Duration;
import java.time.Instant;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/**
 * What a {@link JobHandler} gets for one item of one execution: ElasticJob's
 * {@code ShardingContext} fields (same names) plus the execution id, the trigger source, the
 * attempt, the item's fencing token and the trigger's W3C trace context.
 */
public final class ShardingContext {
  private final String jobName;
  private final String taskId;
  private final int shardingTotalCount;
  private final String jobParameter;
  private final int shardingItem;
  private final String shardingParameter;
  private final String executionId;
  private final TriggerSource source;
  private final long fencingToken;
  private final Instant fireTime;
  private final String traceparent;
  private final String tracestate;
  private final int attempt;
  private volatile BooleanSupplier cancellation;
  /**
   * The latest assignment of the stream that delivered this item's trigger, when the worker started
   * it ({@link Assignment#NONE} when none had arrived on that stream yet); null when not started by
   * a worker.
   */
  private volatile Assignment startAssignment;

  /** A context without trace context (empty {@code traceparent} and {@code tracestate}). */
  public ShardingContext(
      String jobName,
      String taskId,
      int shardingTotalCount,
      String jobParameter,
      int shardingItem,
      String shardingParameter,
      String executionId,
      TriggerSource source,
      long fencingToken,
      Instant fireTime) {
    this(jobName, taskId, shardingTotalCount, jobParameter, shardingItem, shardingParameter, executionId, source,
        fencingToken, fireTime, "", "");
  }

  /**
   * A context of a first run (attempt 0) with the trigger's W3C {@code traceparent} and
   * {@code tracestate} (null reads as empty).
   */
  public ShardingContext(
      String jobName,
      String taskId,
      int shardingTotalCount,
      String jobParameter,
      int shardingItem,
      String shardingParameter,
      String executionId,
      TriggerSource source,
      long fencingToken,
      Instant fireTime,
      String traceparent,
      String tracestate) {
    this(jobName, taskId, shardingTotalCount, jobParameter, shardingItem, shardingParameter, executionId, source,
        fencingToken, fireTime, traceparent, tracestate, 0);
  }

  /**
   * A context with the trigger's W3C trace context and its {@code attempt} (0 for a first run, 1
   * for the first retry).
   */
  public ShardingContext(
      String jobName,
      String taskId,
      int shardingTotalCount,
      String jobParameter,
      int shardingItem,
      String shardingParameter,
      String executionId,
      TriggerSource source,
      long fencingToken,
      Instant fireTime,
      String traceparent,
      String tracestate,
      int attempt) {
    this.jobName = Objects.requireNonNull(jobName, "jobName");
    this.taskId = Objects.requireNonNullElse(taskId, "");
    this.shardingTotalCount = shardingTotalCount;
    this.jobParameter = Objects.requireNonNullElse(jobParameter, "");
    this.shardingItem = shardingItem;
    this.shardingParameter = Objects.requireNonNullElse(shardingParameter, "");
    this.executionId = Objects.requireNonNullElse(executionId, "");
    this.source = Objects.requireNonNullElse(source, TriggerSource.UNKNOWN);
    this.fencingToken = fencingToken;
    this.fireTime = fireTime;
    this.traceparent = Objects.requireNonNullElse(traceparent, "");
    this.tracestate = Objects.requireNonNullElse(tracestate, "");
    this.attempt = attempt;
  }

  public String getJobName() {
    return jobName;
  }

  /** ElasticJob-style task id: {@code {job}@-@{items}@-@READY@-@{ip}@-@{pid}}. */
  public String getTaskId() {
    return taskId;
  }

  public int getShardingTotalCount() {
    return shardingTotalCount;
  }

  public String getJobParameter() {
    return jobParameter;
  }

  public int getShardingItem() {
    return shardingItem;
  }

  /** The item's parameter from {@code shardingItemParameters}, empty when it has none. */
  public String getShardingParameter() {
    return shardingParameter;
  }

  /** Identifies the execution (one trigger of this instance) across its items. */
  public String getExecutionId() {
    return executionId;
  }

  /** Why the execution started; {@link TriggerSource#UNKNOWN} when the sidecar did not say. */
  public TriggerSource getSource() {
    return source;
  }

  /**
   * Which run of this item it is under the job's retry policy: 0 for a first run (a cron fire, a
   * trigger-once, a catch-up), 1 for the first retry ({@link #getSource()} is
   * {@link TriggerSource#RETRY}), and so on. A {@link TriggerSource#FAILOVER} run that takes over
   * a retry carries that retry's attempt.
   */
  public int getAttempt() {
    return attempt;
  }

  /**
   * Grows every time this item changes hands. Pass it to a downstream store that keeps the highest
   * token seen per item and rejects writes carrying a lower one.
   */
  public long getFencingToken() {
    return fencingToken;
  }

  /** When the trigger fired, if the sidecar said; {@code null} otherwise. */
  public Instant getFireTime() {
    return fireTime;
  }

  /**
   * The W3C {@code traceparent} of the execution's span in the sidecar ({@code shardcar.execution}),
   * e.g. {@code 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01}; empty from a sidecar
   * that does not send one. With {@code opentelemetry-api} on the classpath the handler already
   * runs in a child span of it (see {@link ShardcarWorker.Builder#openTelemetry}); other tracers
   * can read it here.
   */
  public String getTraceparent() {
    return traceparent;
  }

  /** The W3C {@code tracestate} that goes with {@link #getTraceparent()}; usually empty. */
  public String getTracestate() {
    return tracestate;
  }

  /**
   * True once this item was revoked, the lease ran out, the stream was lost, or the worker's
   * drain timeout is over (for a {@link ResidentHandler}'s hold also once the sidecar sent
   * {@code Shutdown} or the worker closes): its result will not be reported, so the handler
   * should stop.
   * Evaluated when called: the lease deadline is compared with the clock now, so the first call
   * after the process was paused past its lease already returns true. The handler's thread is
   * interrupted as well, once a timer notices. After the handler returned: false when its answer
   * was sent, true when the item was declined instead. False for a context not started by a worker.
   */
  public boolean isCancelled() {
    BooleanSupplier c = cancellation;
    return c != null && c.getAsBoolean();
  }

  /**
   * Waits up to {@code timeout} for this item to be cancelled (see {@link #isCancelled()}), for a
   * handler that works in steps, a {@link ResidentHandler} above all:
   * {@code while (!ctx.awaitCancelled(Duration.ofSeconds(1))) { poll(); }}. Returns true as soon as
   * the item is cancelled (at once if it already is), false when the time is up first. A cancel
   * interrupts the handler's thread, which ends the wait at once; the lease is compared with the
   * clock at every check, so a wait across a pause of the process sees the lapse when it resumes.
   * The cancel's interrupt is consumed: the handler may still clean up (close a consumer, write a
   * last checkpoint under its fencing token) before it returns.
   *
   * @param timeout how long to wait at most; zero or negative checks once
   * @return true when the item is cancelled
   * @throws InterruptedException when the thread is interrupted for another reason than the item's
   *     cancellation
   */
  public boolean awaitCancelled(Duration timeout) throws InterruptedException {
    long end = System.nanoTime() + Math.max(0, Objects.requireNonNull(timeout, "timeout").toNanos());
    while (true) {
      if (isCancelled()) {
        Thread.interrupted(); // the cancel's own interrupt, if it came already
        return true;
      }
      long left = end - System.nanoTime();
      if (left <= 0) {
        return false;
      }
      try {
        TimeUnit.NANOSECONDS.sleep(Math.min(left, MAX_WAIT_STEP_NANOS));
      } catch (InterruptedException e) {
        if (isCancelled()) {
          return true;
        }
        throw e;
      }
    }
  }

  /** The longest sleep of {@link #awaitCancelled} between two checks (a cancel also interrupts it). */
  private static final long MAX_WAIT_STEP_NANOS = TimeUnit.MILLISECONDS.toNanos(100);

  /** Set by the worker before the handler runs. */
  void attach(BooleanSupplier cancellation) {
    this.cancellation = cancellation;
  }

  /** Set by the worker when it starts the item: the assignment its trigger came under. */
  void startAssignment(Assignment assignment) {
    this.startAssignment = assignment;
  }

  Assignment startAssignment() {
    return startAssignment;
  }

  @Override
  public String toString() {
    return "ShardingContext{jobName=" + jobName + ", taskId=" + taskId
        + ", shardingTotalCount=" + shardingTotalCount + ", jobParameter=" + jobParameter
        + ", shardingItem=" + shardingItem + ", shardingParameter=" + shardingParameter
        + ", executionId=" + executionId + ", source=" + source + ", attempt=" + attempt
        + ", fencingToken=" + fencingToken + ", traceparent=" + traceparent + "}";
  }
}
