package io.shardcar.client;

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
        .setShardingStrategy(io.shardcar.v1.ShardingStrategy.valueOf(c.getShardingStrategy().name()))
        .setDescription(c.getDescription())
        .setDisabled(c.isDisabled())
        .putAllProps(c.getProps())
        .setExecutionTimeoutSeconds(c.getExecutionTimeoutSeconds());
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
        .executionTimeoutSeconds(p.getExecutionTimeoutSeconds());
    if (p.getShardingStrategy() != io.shardcar.v1.ShardingStrategy.UNRECOGNIZED) {
      b.shardingStrategy(ShardingStrategy.valueOf(p.getShardingStrategy().name()));
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

  static Assignment fromProto(io.shardcar.v1.Assignment a) {
    TreeMap<Integer, String> items = new TreeMap<>();
    for (ShardItem item : a.getItemsList()) {
      items.put(item.getItem(), item.getParameter());
    }
    return new Assignment(items, a.getLeader(), a.getEpoch());
  }

  static TriggerSource fromProto(io.shardcar.v1.TriggerSource s) {
    return switch (s) {
      case MISFIRE -> TriggerSource.MISFIRE;
      case FAILOVER -> TriggerSource.FAILOVER;
      case MANUAL -> TriggerSource.MANUAL;
      default -> TriggerSource.CRON;
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
            fireTime))
        .toList();
  }
}
