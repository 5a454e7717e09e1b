package io.shardcar.client;

import com.google.protobuf.Duration;
import io.shardcar.v1.ShardItem;
import java.time.Instant;
import java.util.List;
import java.util.TreeMap;

/** Conversions between the client's types and the generated {@code shardcar.v1} messages. */
final class ProtoMapping {
  private ProtoMapping() {}

  static io.shardcar.v1.JobConfig toProto(JobConfig c) {
    io.shardcar.v1.JobConfig.Builder b = io.shardcar.v1.JobConfig.newBuilder()
        .setJobName(c.getJobName())
        .setCron(c.getCron())
        .setTimeZone(c.getTimeZone())
        .setShardingTotalCount(c.getShardingTotalCount())
        .putAllShardingItemParameters(c.getShardingItemParameters())
        .setJobParameter(c.getJobParameter())
        .setFailover(c.isFailover())
        .setShardingStrategy(toProto(c.getShardingStrategy()))
        .setDescription(c.getDescription())
        .setDisabled(c.isDisabled())
        .putAllProps(c.getProps())
        .setExecutionTimeoutSeconds(c.getExecutionTimeoutSeconds())
        .setJobErrorHandlerType(c.getJobErrorHandlerType())
        .setResident(c.isResident());
    if (c.getRetry() != null) {
      b.setRetry(toProto(c.getRetry()));
    }
    if (c.getMisfire() != null) {
      b.setMisfire(c.getMisfire());
    }
    if (c.getMonitorExecution() != null) {
      b.setMonitorExecution(c.getMonitorExecution());
    }
    if (c.getMaxTimeDiffSeconds() != null) {
      b.setMaxTimeDiffSeconds(c.getMaxTimeDiffSeconds());
    }
    if (c.getReconcileIntervalMinutes() != null) {
      b.setReconcileIntervalMinutes(c.getReconcileIntervalMinutes());
    }
    return b.build();
  }

  static JobConfig fromProto(io.shardcar.v1.JobConfig p) {
    JobConfig.Builder b = JobConfig.builder()
        .jobName(p.getJobName())
        .cron(p.getCron())
        .timeZone(p.getTimeZone())
        .shardingTotalCount(p.getShardingTotalCount())
        .shardingItemParameters(p.getShardingItemParametersMap())
        .jobParameter(p.getJobParameter())
        .failover(p.getFailover())
        .description(p.getDescription())
        .disabled(p.getDisabled())
        .props(p.getPropsMap())
        .executionTimeoutSeconds(p.getExecutionTimeoutSeconds())
        .jobErrorHandlerTypeAsSent(p.getJobErrorHandlerType())
        .residentAsSent(p.getResident());
    if (p.hasRetry()) {
      b.retry(fromProto(p.getRetry()));
    }
    ShardingStrategy strategy = fromProto(p.getShardingStrategy());
    if (strategy != null) {
      b.shardingStrategy(strategy);
    }
    if (p.hasMisfire()) {
      b.misfire(p.getMisfire());
    }
    if (p.hasMonitorExecution()) {
      b.monitorExecution(p.getMonitorExecution());
    }
    if (p.hasMaxTimeDiffSeconds()) {
      b.maxTimeDiffSeconds(p.getMaxTimeDiffSeconds());
    }
    if (p.hasReconcileIntervalMinutes()) {
      b.reconcileIntervalMinutes(p.getReconcileIntervalMinutes());
    }
    return b.build();
  }

  /** A retry policy on the wire: unset fields stay unset ({@code multiplier} 0). */
  static io.shardcar.v1.RetryPolicy toProto(RetryPolicy r) {
    io.shardcar.v1.RetryPolicy.Builder b = io.shardcar.v1.RetryPolicy.newBuilder()
        .setMaxAttempts(r.getMaxAttempts())
        .setMultiplier(r.getMultiplier() == null ? 0 : r.getMultiplier());
    if (r.getInitialBackoff() != null) {
      b.setInitialBackoff(toProto(r.getInitialBackoff()));
    }
    if (r.getMaxBackoff() != null) {
      b.setMaxBackoff(toProto(r.getMaxBackoff()));
    }
    return b.build();
  }

  /** The policy the sidecar sent, as it is (see {@link RetryPolicy#asSent}). */
  static RetryPolicy fromProto(io.shardcar.v1.RetryPolicy p) {
    return RetryPolicy.asSent(
        p.getMaxAttempts(),
        p.hasInitialBackoff() ? fromProto(p.getInitialBackoff()) : null,
        p.hasMaxBackoff() ? fromProto(p.getMaxBackoff()) : null,
        p.getMultiplier() == 0 ? null : p.getMultiplier());
  }

  private static Duration toProto(java.time.Duration d) {
    return Duration.newBuilder().setSeconds(d.getSeconds()).setNanos(d.getNano()).build();
  }

  private static java.time.Duration fromProto(Duration d) {
    return java.time.Duration.ofSeconds(d.getSeconds(), d.getNanos());
  }

  static Assignment fromProto(io.shardcar.v1.Assignment a) {
    TreeMap<Integer, String> items = new TreeMap<>();
    for (ShardItem item : a.getItemsList()) {
      items.put(item.getItem(), item.getParameter());
    }
    return new Assignment(items, a.getLeader(), a.getEpoch());
  }

  static io.shardcar.v1.ShardingStrategy toProto(ShardingStrategy s) {
    return switch (s) {
      case AVG_ALLOCATION -> io.shardcar.v1.ShardingStrategy.SHARDING_STRATEGY_AVG_ALLOCATION;
      case ODEVITY -> io.shardcar.v1.ShardingStrategy.SHARDING_STRATEGY_ODEVITY;
      case ROUND_ROBIN -> io.shardcar.v1.ShardingStrategy.SHARDING_STRATEGY_ROUND_ROBIN;
    };
  }

  /**
   * The client's strategy for a proto one; unset means {@link ShardingStrategy#AVG_ALLOCATION}
   * (ElasticJob's default, as the sidecar reads it). {@code null} for a value this client does
   * not know (a newer sidecar): the caller keeps its default then.
   */
  static ShardingStrategy fromProto(io.shardcar.v1.ShardingStrategy s) {
    return switch (s) {
      case SHARDING_STRATEGY_UNSPECIFIED, SHARDING_STRATEGY_AVG_ALLOCATION -> ShardingStrategy.AVG_ALLOCATION;
      case SHARDING_STRATEGY_ODEVITY -> ShardingStrategy.ODEVITY;
      case SHARDING_STRATEGY_ROUND_ROBIN -> ShardingStrategy.ROUND_ROBIN;
      case UNRECOGNIZED -> null;
    };
  }

  /**
   * The client's source for a proto one. {@code TRIGGER_SOURCE_UNSPECIFIED} (never sent) and values
   * this client does not know read as {@link TriggerSource#UNKNOWN}, never as a cron fire.
   */
  static TriggerSource fromProto(io.shardcar.v1.TriggerSource s) {
    return switch (s) {
      case TRIGGER_SOURCE_CRON -> TriggerSource.CRON;
      case TRIGGER_SOURCE_MISFIRE -> TriggerSource.MISFIRE;
      case TRIGGER_SOURCE_FAILOVER -> TriggerSource.FAILOVER;
      case TRIGGER_SOURCE_MANUAL -> TriggerSource.MANUAL;
      case TRIGGER_SOURCE_RETRY -> TriggerSource.RETRY;
      case TRIGGER_SOURCE_RESIDENT -> TriggerSource.RESIDENT;
      case TRIGGER_SOURCE_UNSPECIFIED, UNRECOGNIZED -> TriggerSource.UNKNOWN;
    };
  }

  /** One context per item of a trigger, in the trigger's item order. */
  static List<ShardingContext> contexts(String jobName, io.shardcar.v1.Trigger t) {
    Instant fireTime = t.hasFireTime()
        ? Instant.ofEpochSecond(t.getFireTime().getSeconds(), t.getFireTime().getNanos())
        : null;
    TriggerSource source = fromProto(t.getSource());
    return t.getItemsList().stream()
        .map(item -> new ShardingContext(
            jobName,
            t.getTaskId(),
            t.getShardingTotalCount(),
            t.getJobParameter(),
            item.getItem(),
            item.getParameter(),
            t.getExecutionId(),
            source,
            t.getFencingTokensOrDefault(item.getItem(), 0L),
            fireTime,
            t.getTraceparent(),
            t.getTracestate(),
            t.getAttempt()))
        .toList();
  }
}
